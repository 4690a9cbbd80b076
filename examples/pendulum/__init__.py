"""Pendulum (Gymnasium) through the Gymnasium adapter: continuous (Box) actions, the spec
presets/td3_pendulum.py trains on."""
