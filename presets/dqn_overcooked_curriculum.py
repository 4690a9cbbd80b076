"""A curriculum on Overcooked (Cogment's §2.1): `trialog train presets/dqn_overcooked_curriculum.py`.

One cook (cook_a, DQN) learns in CoGrid's cramped room beside partners that change by stage
(examples/overcooked/curriculum.yaml):

1. ``planner`` — the rule-based planner, the pseudo-human;
2. ``bc`` — a behaviour clone of the planner's demonstrations, made before the stages
   (planner+planner trials played in the run's process, cloned by trialog.learn.bc: the
   imperfect, human-like partner a clone of people's demonstrations would be).

Each stage starts with the planner's demonstrations: its heatup trials are the planner's, in
cook_a's seat beside the stage's partner (DQN's ``demonstrator``: DQfD's large-margin loss on
those steps). Beside the clone a cook must serve the soups the clone starts, which ε-greedy
DQN did not find alone in 40,000 steps; the planner in its seat serves them.

A stage moves on at its first evaluation whose mean return reaches its threshold, else when
its budget is spent. Then ``random`` plays cook_a in the last evaluation's trials, with the
same seeds and the same BC partner: what the training bought (``baseline`` in summary.json).

DQN rather than PPO: off-policy, it learns from every step whichever version acted (through
the log the learner trains beside the actors and never makes them wait), keeps learning from
its replay memory across the change of partner, and samples less than PPO on two cores.
Hyperparameters: the CartPole preset's DQN with Overcooked's sizes (892 features, 7 actions),
longer exploration and 3-step returns (a soup's reward comes many steps after the moves that
make it), evaluated at ε 0.05 (a greedy cook beside the deterministic clone got stuck in the same
place trial after trial), DQfD's margin (0.8) and weight (1.0). docs/learning.md, "Curricula",
has the runs.
"""

from trialog.learn.curriculum import Curriculum, Stage, behaviour_clone
from trialog.learn.train import Schedule, Validation

preset = Curriculum(
    name="dqn-overcooked-curriculum",
    spec="../examples/overcooked/curriculum.yaml",
    implementation="dqn",
    actors=("cook_a",),
    agent={
        "learning_rate": 5e-4,
        "learning_rate_decay_steps": 40_000,
        "batch_size": 64,
        "learning_starts": 1_000,
        "train_frequency": 400,
        "gradient_steps": 200,
        "target_update_interval": 400,
        "n_step": 3,
        "gamma": 0.99,
        "max_grad_norm": 10.0,
        "exploration_steps": 30_000,
        "end_e": 0.05,
        "eval_e": 0.05,
        "demonstrator": "trialog.examples.overcooked.cooks:OvercookedPlanner",
        "hidden": [128, 128],
        "seed": 1,
    },  # fmt: skip
    stages=(
        Stage(
            "planner",
            partners={"cook_b": "planner"},
            schedule=Schedule(
                heatup_steps=1_600,
                steps_between_evaluations=4_000,
                evaluation_trials=8,
                total_steps=20_000,
                concurrency=4,
            ),  # fmt: skip
            validation=Validation(min_reward_threshold=200),
        ),
        Stage(
            "bc",
            partners={"cook_b": "bc"},
            schedule=Schedule(
                heatup_steps=2_000,
                steps_between_evaluations=4_000,
                evaluation_trials=16,
                total_steps=20_000,
                concurrency=4,
            ),  # fmt: skip
        ),
    ),
    models={"overcooked-curriculum-bc": behaviour_clone("planner", trials=8, epochs=30)},
    baseline="random",
)
