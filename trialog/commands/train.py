"""``trialog train PRESET``: a training preset's phases over trials (:mod:`trialog.learn.train`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trialog.commands.parts import command


def add(sub) -> None:
    p = command(
        sub,
        "train",
        "Run a training preset: heatup, train and evaluate phases over trials, a learner, a table and a plot.",
    )
    p.add_argument(
        "preset", metavar="PRESET",
        help="the preset file (Python, defining `preset = Preset(...)`), "
        "or a shipped preset's name (dqn_cartpole, ppo_cartpole)",
    )  # fmt: skip
    p.add_argument(
        "--out", default="",
        help="folder for the plot, its data, the derived spec and the services' logs (default: train-<experiment>)",
    )  # fmt: skip
    p.add_argument("--total-steps", type=int, help="override the schedule's budget (e.g. a short run)")

    def do_train(args) -> int:
        from trialog.learn.train import load_preset, plot, table, train
        from trialog.settings import from_args

        preset = load_preset(args.preset)
        if args.total_steps:
            schedule = dataclasses.replace(preset.schedule, total_steps=args.total_steps)
            preset = dataclasses.replace(preset, schedule=schedule)
        out = Path(args.out or f"train-{preset.name}")
        result = train(from_args(args), preset, out)
        print(table(preset, result))
        files = plot(preset, result, out / "eval_return.png")
        print(f"plot: {files.png} (data: {files.csv}, {files.json})")
        return 0 if result.valid in (None, True) else 1

    p.set_defaults(func=do_train)
