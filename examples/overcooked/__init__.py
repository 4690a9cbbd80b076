"""Overcooked (CoGrid) through the PettingZoo adapter: cooks (cooks.py), a spec for agents
(spec.yaml) and one for people in a browser (people.yaml)."""
