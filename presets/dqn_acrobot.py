"""DQN on Gymnasium's Acrobot-v1: another discrete-action env in a few lines. The network's
sizes come from the actor class's spaces (6 observations, 3 actions); docs/learning.md has the run."""

from trialog.learn.train import Preset, Schedule, Validation

preset = Preset(
    name="dqn-acrobot",
    spec="../examples/acrobot/spec.yaml",
    implementation="dqn",
    agent={"learning_rate_decay_steps": 30_000, "exploration_steps": 10_000, "end_e": 0.05},
    schedule=Schedule(
        heatup_steps=1_000, steps_between_evaluations=5_000, evaluation_trials=10, total_steps=30_000, concurrency=2
    ),
    validation=Validation(min_reward_threshold=-100),
)
