"""The Overcooked curriculum with people last (Cogment's §2.1, "once the AI agents are good enough,
start involving the actual humans"): `trialog train presets/dqn_overcooked_curriculum_people.py`.

presets/dqn_overcooked_curriculum.py's stages — cook_a (DQN) beside the planner, then beside a
behaviour clone of the planner — then a third, ``people``: cook_b is a person (the spec's ``human``,
a client seat). `trialog train` starts a gateway beside the services; each trial of the stage waits
for its person, who opens the join link printed for the seat, or takes the seat from the gateway's
lobby. `--person trialog.tools.person:random_person` (or any scripted stand-in, as for `trialog
teaming --scripted`) plays the seats through the gateway instead, as CI does. Through the log only:
`--in-process` refuses a stage of people.
"""

import dataclasses
from pathlib import Path

from trialog.learn.curriculum import Stage
from trialog.learn.train import Schedule, load_preset

without_people = load_preset(Path(__file__).with_name("dqn_overcooked_curriculum.py"))

preset = dataclasses.replace(
    without_people,
    name="dqn-overcooked-curriculum-people",
    stages=(
        *without_people.stages,
        Stage(
            "people",
            partners={"cook_b": "human"},
            # A person plays a trial at a time, at their pace: a short stage, two at once.
            schedule=Schedule(
                heatup_steps=0, steps_between_evaluations=2_000, evaluation_trials=2, total_steps=2_000, concurrency=2
            ),
        ),
    ),
    schedule=Schedule(),  # the stages' schedules, summed (trialog.learn.curriculum)
)
