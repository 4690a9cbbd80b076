"""Trialog's performance benchmark (``python bench/run.py``); see ``docs/performance.md``."""
