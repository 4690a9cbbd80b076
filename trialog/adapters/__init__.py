"""Adapters that host environments users already have: PettingZoo, Gymnasium, and
through PettingZoo CoGrid's Overcooked. See ``docs/environments.md``.

May import the user API (:mod:`trialog.environment`, :mod:`trialog.rewards`,
:mod:`trialog.spec`) and the protocol; PettingZoo, Gymnasium and CoGrid (the ``envs``
extra) only in the adapter that needs them. The runtimes host them like any environment.
"""
