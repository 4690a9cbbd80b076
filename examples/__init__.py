"""The shipped examples, one self-contained folder each: its spec (``spec.yaml``) beside
the code and schemas the spec names. Installed as ``trialog.examples`` (so a spec names
``trialog.examples.rps.game:RockPaperScissors``) and run by ``trialog demo`` from a wheel.

- ``rps/``: rock-paper-scissors, a game written against :class:`trialog.environment.Environment`.
- ``overcooked/``: CoGrid's Overcooked through the PettingZoo adapter, with planner and
  behaviour-cloned cooks, and a spec for people playing from a browser (``people.yaml``).
- ``cartpole/``: Gymnasium's CartPole through the Gymnasium adapter (the learning presets).
- ``first_env/``: guess the number, a game written from scratch whose schemas come from the
  Gymnasium spaces it declares (:mod:`trialog.adapters.declared`).
"""
