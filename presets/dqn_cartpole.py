"""DQN on Gymnasium's CartPole-v1, through Trialog: `trialog train presets/dqn_cartpole.py`.

Hyperparameters are those of RL Baselines3 Zoo's tuned DQN for CartPole-v1 (smaller
hidden layers); trialog.learn.dqn documents each. Validation as Coach's CartPole
preset: a mean evaluation return of at least 475 (of 500).
"""

from trialog.learn.train import Preset, Schedule, Validation

preset = Preset(
    name="dqn-cartpole",
    spec="../examples/cartpole.yaml",
    implementation="dqn",
    agent={"learning_rate": 2.3e-3, "batch_size": 64, "learning_starts": 1_000, "train_frequency": 256, "gradient_steps": 128,
           "exploration_steps": 8_000, "end_e": 0.04, "hidden": [128, 128], "seed": 1},  # fmt: skip
    schedule=Schedule(heatup_steps=1_000, steps_between_evaluations=5_000, evaluation_trials=10, total_steps=60_000, concurrency=8),
    validation=Validation(min_reward_threshold=475),
)
