"""``trialog demo``: a local broker and a demo campaign end to end (:mod:`trialog.tools.demo`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from trialog.commands.parts import add_trial_overrides
from trialog.tools import demo
from trialog.tools.demo import DEMOS, EXAMPLES, default_game, demo_settings, follow_up, play_with_people


def add(sub) -> None:
    p = sub.add_parser(
        "demo", help="Start a local broker and run a demo campaign end to end.", description=demo.__doc__
    )
    p.add_argument("--game", choices=sorted(DEMOS), default=default_game(), help="which demo (default: %(default)s)")
    p.add_argument("--trials", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument(
        "--archive-dir", default="trialog-archive", help="where the logger archives trials (if the logger is installed)"
    )
    p.add_argument(
        "--plot", default="trialog-plots/demo-returns.png", metavar="FILE.png",
        help="where the returns plot goes (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--humans", action="store_true",
        help="play Overcooked yourself beside the planner: starts the web gateway and prints the link to open",
    )  # fmt: skip
    p.add_argument("--gateway-port", type=int, default=8000, help="with --humans: the gateway's port (default 8000)")
    p.add_argument(
        "--max-ticks", type=int, default=None, metavar="N",
        help="with --humans: length of the trial (default: the spec's 400 ticks, a minute)",
    )  # fmt: skip
    p.set_defaults(func=run)


def run(args) -> int:
    from trialog.broker.process import start as start_broker
    from trialog.commands.run import run_from_args

    bootstrap = start_broker()
    print(f"broker ready at {bootstrap}", file=sys.stderr)
    settings = demo_settings(bootstrap)
    if args.humans:
        with_gateway = dataclasses.replace(settings, gateway_url=f"http://127.0.0.1:{args.gateway_port}")
        return play_with_people(with_gateway, args.gateway_port, args.max_ticks)
    spec_file, pairings = DEMOS[args.game]
    archive = args.archive_dir if _logger_available() else None
    code = run_from_args(campaign_args(args, spec_file), settings, pairings=pairings, archive_dir=archive)
    if archive:
        print(f"archive: {Path(archive).resolve()}")
    print(f"its trials: {follow_up(settings, 'trial list')}", file=sys.stderr)
    print("the broker keeps running (the log is the datalog); stop it with `trialog broker stop`", file=sys.stderr)
    return code


def _logger_available() -> bool:
    """The logger archives trials as Parquet: only where the datalog extra (pyarrow) is installed."""
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def campaign_args(args: argparse.Namespace, spec_file: str) -> argparse.Namespace:
    """The arguments of `trialog run` that the demo's campaign amounts to."""
    # The override flags' defaults come from the flags themselves, so that a flag added to
    # `trialog run` can never be missing from the demo's arguments.
    overrides = argparse.ArgumentParser(add_help=False)
    add_trial_overrides(overrides, seed_help="")
    return overrides.parse_args([], argparse.Namespace(
        spec_file=str(EXAMPLES / spec_file), trials=args.trials, concurrency=args.concurrency, serve=True,
        environment_processes=1, actor_processes=1, plot=args.plot,
    ))  # fmt: skip
