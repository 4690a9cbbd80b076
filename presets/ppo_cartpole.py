"""PPO on Gymnasium's CartPole-v1, through Trialog: `trialog train presets/ppo_cartpole.py`.

RL Baselines3 Zoo's PPO hyperparameters for CartPole (batches of every transition acted
by one version, at least 256; 20 epochs; the rate decaying linearly to 0 over the
budget), ReLU layers.
On-policy, collected synchronously by version: no heatup; the learner uses the
transitions of the version it published last and, corrected, those of the one before
that arrive late; it discards, and counts, any other.
16 trials at once: through the log each request then carries more ticks (a run took 216 s
where 8 at once took 297 s), and both modes still reach 500; at 32 neither stayed above 475
(docs/learning.md has the runs). Evaluations run beside training, each trial of one pinned to
the version it evaluates: through the log the training trials then go on through them, where
otherwise every stretch waited for its slowest trial and the evaluation ran alone.
"""

from trialog.learn.train import Preset, Schedule, Validation

preset = Preset(
    name="ppo-cartpole",
    spec="../examples/cartpole/spec.yaml",
    implementation="ppo",
    agent={
        "learning_rate": 1e-3,
        "anneal_steps": 100_000,
        "rollout_steps": 256,
        "update_epochs": 20,
        "minibatches": 1,
        "gamma": 0.98,
        "gae_lambda": 0.8,
        "ent_coef": 0.0,
        "hidden": [64, 64],
        "seed": 1,
    },
    schedule=Schedule(
        heatup_steps=0,
        steps_between_evaluations=10_000,
        evaluation_trials=10,
        total_steps=100_000,
        concurrency=16,
        evaluate_beside_training=True,
    ),
    validation=Validation(min_reward_threshold=475),
)
