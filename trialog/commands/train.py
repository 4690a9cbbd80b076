"""``trialog train PRESET``: a training preset's phases over trials (:mod:`trialog.learn.train`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trialog.commands.parts import command
from trialog.errors import TrialogError


def add(sub) -> None:
    p = command(
        sub,
        "train",
        "Run a training preset: heatup, train and evaluate phases over trials, a learner, a table, a plot and "
        "summary.json; through the log, or --in-process.",
    )
    p.add_argument(
        "preset", metavar="PRESET",
        help="the preset file (Python, defining `preset = Preset(...)`), "
        "or a shipped preset's name (dqn_cartpole, dqn_acrobot, ppo_cartpole, td3_pendulum)",
    )  # fmt: skip
    p.add_argument(
        "--out", default="",
        help="folder for the plot, its data, the derived spec and the services' logs (default: train-<experiment>)",
    )  # fmt: skip
    p.add_argument("--total-steps", type=int, help="override the schedule's budget (e.g. a short run)")
    p.add_argument(
        "--tensorboard", metavar="DIR", default="",
        help="folder for the TensorBoard curves written as it runs (default: OUT/tensorboard)",
    )  # fmt: skip
    p.add_argument(
        "--person", metavar="MODULE:FUNCTION", default=None,
        help="a scripted stand-in that plays the trials' seats of people through the gateway (as trialog teaming "
        "--scripted; e.g. trialog.tools.person:random_person), instead of the preset's; without one, each seat's "
        "join link is printed for a person to open",
    )  # fmt: skip
    p.add_argument(
        "--in-process", action="store_true",
        help="run the same preset in this one process over the environment directly: no broker, no services "
        "(to debug a preset, and the baseline its runs through the log are measured against)",
    )  # fmt: skip

    p.add_argument(
        "--resume", action="store_true",
        help="train on from the newest version of the preset's model that an earlier run left under the same "
        "topic prefix (without it, such a version is refused: a run is fresh or says it is not)",
    )  # fmt: skip

    def do_train(args) -> int:
        from trialog.learn.curriculum import CurriculumResult, stages_table
        from trialog.learn.report import plot, table
        from trialog.learn.train import load_preset

        preset = load_preset(args.preset)
        if args.total_steps is not None:  # a curriculum shares it among its stages (trialog.learn.curriculum)
            schedule = dataclasses.replace(preset.schedule, total_steps=args.total_steps)  # checked by Schedule
            preset = dataclasses.replace(preset, schedule=schedule)
        if args.person is not None:
            from trialog.tools.person import load_person

            load_person(args.person)  # a name that does not load fails now, not at the first seat
            preset = dataclasses.replace(preset, person=args.person)
        out = Path(args.out or f"train-{preset.name}")
        tensorboard = Path(args.tensorboard) if args.tensorboard else None
        if args.in_process:
            from trialog.learn.in_process import train_in_process

            if args.resume:
                raise TrialogError(
                    "--resume is for runs through the log: an in-process run keeps no model between runs"
                )

            result = train_in_process(preset, out, tensorboard=tensorboard)
        else:
            from trialog.learn.through_log import train
            from trialog.settings import from_args

            result = train(from_args(args), preset, out, tensorboard=tensorboard, resume=args.resume)
        print(table(preset, result))
        if isinstance(result, CurriculumResult):
            print(stages_table(result))
        files = plot(preset, result, out / "eval_return.png")
        print(f"plot: {files.png} (data: {files.csv}, {files.json})")
        print(f"summary: {out / 'summary.json'}")
        return 0 if result.valid in (None, True) else 1

    p.set_defaults(func=do_train)
