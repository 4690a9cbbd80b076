"""Agents shipped with Trialog for any actor class: a random agent that samples each
action from the class's action schema (:mod:`~trialog.agents.random_agent`). A spec names
it like any other implementation: ``entry: "trialog.agents.random_agent:RandomAgent"``.
Game-specific players live with their game (``examples/rps/players.py``,
``examples/overcooked/cooks.py``).

May import the user API (:mod:`trialog.actor`, :mod:`trialog.environment`) and the
protocol: it is what a user writes, and uses nothing more.
"""
