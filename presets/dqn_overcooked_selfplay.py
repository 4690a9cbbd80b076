"""Self-play on Overcooked: `trialog train presets/dqn_overcooked_selfplay.py`.

Both cooks of CoGrid's cramped room (examples/overcooked/selfplay.yaml) are played by one DQN, so
both learn at once with one shared policy (parameter sharing): the preset names no `actors`, the
implementation plays both, and the learner takes the transitions of both — each cook's steps
linked to its own previous ones, so that n-step returns follow one cook. The reward is common
(CoGrid's cramped room gives both cooks every soup's 20, and the shaping's 3 per onion in a pot
and 5 per soup in a dish), so a cook's return is the team's. planner+planner on the same layout
is the bar: 145 on every seed. Measured (docs/learning.md, "Self-play on Overcooked"): in-process
the two cooks pass half of it at 38,400 ticks and play near the planner's level from 44,800 on
(139); through the log one run passed half at 43,000 ticks (111.6), another stayed below 10 in its
greedy evaluations while its train trials (ε 0.05) delivered soups: identical greedy cooks can get
stuck.

One shared policy rather than two: the cooks' observations are each cook's own view (its
position, direction and inventory first, then its partner's), so one network serves both seats
and learns from twice the steps. DQN rather than PPO: off-policy, it trains on every step of
both cooks whichever version acted (through the log the learner trains beside the actors and
never makes them wait); in a first measurement on this layout PPO self-play (batches of 2,048
transitions, 8 epochs, rate 1e-3) evaluated at 0.0 after 6,400 ticks where DQN was at 0.4 (the
spec declares `ppo` too, to try it).

Hyperparameters: the curriculum preset's DQN for Overcooked (892 features, 7 actions, 128x128,
3-step returns, rate 5e-4) with one update per transition. The learner counts transitions, two
per tick: its step counts (learning_starts, exploration_steps, the rate's decay) are twice the
ticks they stand for. CoGrid's numpy backend (the PettingZoo adapter), not the JAX one: the JAX
adapter compiles its batch sizes first (72 s in a trial run on the shared machine, its first 3,200
ticks no faster than numpy's), not clearly won back in a run of this length; not measured further.
"""

from trialog.learn.train import Preset, Schedule

preset = Preset(
    name="dqn-overcooked-selfplay",
    spec="../examples/overcooked/selfplay.yaml",
    implementation="dqn",
    agent={
        "learning_rate": 5e-4,
        "learning_rate_decay_steps": 120_000,  # 60,000 ticks
        "batch_size": 64,
        "learning_starts": 3_200,  # the heatup's 1,600 ticks
        "train_frequency": 400,
        "gradient_steps": 400,
        "target_update_interval": 400,
        "n_step": 3,
        "gamma": 0.99,
        "max_grad_norm": 10.0,
        "exploration_steps": 32_000,  # 16,000 ticks
        "end_e": 0.05,
        "hidden": [128, 128],
        "seed": 1,
    },  # fmt: skip
    schedule=Schedule(
        heatup_steps=1_600, steps_between_evaluations=6_400, evaluation_trials=8, total_steps=60_000, concurrency=16
    ),
)
