"""Adapters that host environments users already have: PettingZoo, Gymnasium, and
through PettingZoo CoGrid's Overcooked. See ``docs/environments.md``."""
