"""A judge of CartPole, for ``trialog judge`` (docs/learning.md, "Learning from a judge"):
it rates a step 1 when the pole is still up and the cart still on the track after it, 0
when the step lost them — what a person watching would say, without the environment's
reward (which gives 1 even for the step that fails)."""

import numpy as np

X_LIMIT, ANGLE_LIMIT = 2.4, 0.2095  # CartPole-v1 ends past these (12 degrees)


def upright(before, after, final):
    """``before``/``after``: the agent's observations at t and t+1 (cart position, its
    velocity, pole angle, its velocity) as the watch socket gives them."""
    x, _, angle, _ = np.asarray(after, dtype=float).reshape(-1)[:4]
    return 1.0 if abs(x) <= X_LIMIT and abs(angle) <= ANGLE_LIMIT else 0.0
