"""DQN on CartPole-v1 learning from a judge's ratings only: `trialog train presets/dqn_cartpole_judged.py`.

The DQN preset (presets/dqn_cartpole.py: the same hyperparameters and validation), with
the environment's own reward left out of training, and 2 trials at once: one judge's
ratings then stay well under the gateway's message rate per address (200/s). A judge — a separate process
(`trialog judge trialog.examples.cartpole.judge:upright`) watching each heatup and train
trial through the gateway, as a person on the watch page would — rates every step 1 while
the pole is up and the cart on the track after it, 0 for the step that loses them, and
sends each rating 5 ticks late: a retroactive reward from person:judge-0, joined to its
tick in the datalog. The learner learns from `person:*` only. Evaluations count the
environment's return (the judge leaves evaluation trials alone). `--in-process` rates the
same steps with the same function, directly (docs/learning.md, "Learning from a judge").
"""

import dataclasses
from pathlib import Path

from trialog.learn.train import load_preset

dqn = load_preset(Path(__file__).resolve().parent / "dqn_cartpole.py")
preset = dataclasses.replace(
    dqn,
    name="dqn-cartpole-judged",
    schedule=dataclasses.replace(dqn.schedule, concurrency=2),
    learn_from=("person:*",),
    judges=("trialog.examples.cartpole.judge:upright",),
)
