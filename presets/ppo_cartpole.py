"""PPO on Gymnasium's CartPole-v1, through Trialog: `trialog train presets/ppo_cartpole.py`.

CleanRL's PPO hyperparameters for CartPole (ReLU layers; rollouts of 512 transitions
of one version, whole trials). On-policy: no heatup; the learner discards, and logs,
transitions acted by a version other than the one it trains.
"""

from trialog.learn.train import Preset, Schedule, Validation

preset = Preset(
    name="ppo-cartpole",
    spec="../examples/cartpole/spec.yaml",
    implementation="ppo",
    agent={
        "learning_rate": 2.5e-4,
        "rollout_steps": 512,
        "update_epochs": 4,
        "minibatches": 4,
        "hidden": [64, 64],
        "seed": 1,
    },
    schedule=Schedule(
        heatup_steps=0, steps_between_evaluations=10_000, evaluation_trials=10, total_steps=100_000, concurrency=8
    ),
    validation=Validation(min_reward_threshold=475),
)
