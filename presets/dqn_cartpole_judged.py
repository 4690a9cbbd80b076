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

from trialog.learn.train import Preset, Schedule, Validation

preset = Preset(
    name="dqn-cartpole-judged",
    spec="../examples/cartpole/spec.yaml",
    implementation="dqn",
    agent={
        "learning_rate": 2.3e-3,
        "learning_rate_decay_steps": 50_000,
        "batch_size": 64,
        "learning_starts": 1_000,
        "train_frequency": 256,
        "gradient_steps": 512,
        "target_update_interval": 512,
        "n_step": 3,
        "tau": 1.0,
        "double": True,
        "huber": False,
        "max_grad_norm": 10.0,
        "exploration_steps": 8_000,
        "end_e": 0.04,
        "hidden": [128, 128],
        "seed": 1,
    },  # fmt: skip
    schedule=Schedule(
        heatup_steps=1_000, steps_between_evaluations=5_000, evaluation_trials=10, total_steps=50_000, concurrency=2
    ),
    validation=Validation(min_reward_threshold=475),
    learn_from=("person:*",),
    judges=("trialog.examples.cartpole.judge:upright",),
)
