"""Small games shipped with Trialog for demos and tests."""
