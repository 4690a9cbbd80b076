"""Acrobot (Gymnasium) through the Gymnasium adapter: the spec presets/dqn_acrobot.py trains on."""
