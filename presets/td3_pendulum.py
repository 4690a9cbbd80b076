"""TD3 on Gymnasium's Pendulum-v1: continuous (Box) actions, `trialog train presets/td3_pendulum.py`.

The known-good TD3 settings for Pendulum (learning rates 1e-3, τ 0.005, γ 0.99, target
noise 0.2 clipped at 0.5, actor every 2nd update, exploration noise 0.1) with 64x64 networks
(the learner is NumPy) and one update per env step; the sizes and the torque bounds come from
the actor class's spaces. docs/learning.md has the runs.
"""

from trialog.learn.train import Preset, Schedule, Validation

preset = Preset(
    name="td3-pendulum",
    spec="../examples/pendulum/spec.yaml",
    implementation="td3",
    agent={
        "hidden": [64, 64],
        "batch_size": 256,
        "learning_starts": 1_000,
        "train_frequency": 200,
        "gradient_steps": 200,
        "seed": 1,
    },  # fmt: skip
    schedule=Schedule(
        heatup_steps=1_000, steps_between_evaluations=5_000, evaluation_trials=10, total_steps=20_000, concurrency=1
    ),
    validation=Validation(min_reward_threshold=-250),
)
