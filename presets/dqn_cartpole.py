"""DQN on Gymnasium's CartPole-v1, through Trialog: `trialog train presets/dqn_cartpole.py`.

Starts from RL Baselines3 Zoo's tuned DQN for CartPole-v1 (learning rate 2.3e-3,
batch 64, a training round every 256 env steps, ε to 0.04 over 8,000 steps; smaller
hidden layers), with the learning rate falling linearly to 0 over the 50,000-step
budget, Double DQN targets, 3-step returns, clipped gradients, and rounds of 512
updates (two per env step) with the target network refreshed once a round; 16 trials
at once (the learner takes each step as it is logged; the ten-seed benchmark passed with
16 as with 2, and the log's cost per step falls with more in flight: docs/learning.md);
through the log each evaluation runs beside the next stretch of training, its trials
pinned to the version it evaluates (the ten-seed benchmark passed with it, in 0.8 of the
wall clock).
trialog.learn.dqn documents each. Validation as Coach's CartPole preset: a
mean evaluation return of at least 475 (of 500).

One-step returns reached 500 and did not stay there (the cart drifting off the track,
a failure's cost reaching the drift too slowly); 3-step returns stay: docs/learning.md
has the runs, the diagnosis and the settings tried.
"""

from trialog.learn.train import Preset, Schedule, Validation

preset = Preset(
    name="dqn-cartpole",
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
        heatup_steps=1_000,
        steps_between_evaluations=5_000,
        evaluation_trials=10,
        total_steps=50_000,
        concurrency=16,
        evaluate_beside_training=True,
    ),
    validation=Validation(min_reward_threshold=475),
)
