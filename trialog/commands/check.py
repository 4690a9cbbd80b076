"""``trialog check``: run an environment through Trialog's contract (:mod:`trialog.tools.check`)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add(sub) -> None:
    """``trialog check ENTRY [--config JSON|@file.yaml] [--seed N] [--steps N]``, or
    ``trialog check --spec SPEC [--environment NAME] [--episodes N]``; exit 1 on failures."""
    parser = sub.add_parser("check", help="Run an environment through Trialog's contract and report what would break.")
    parser.add_argument("entry", nargs="?", help="environment implementation, module:Class (or give --spec)")
    parser.add_argument("--config", default="{}", help="environment config: JSON, or @file (JSON or YAML)")
    parser.add_argument(
        "--spec",
        help="check an environment of this spec as the spec sets it up: its config, the trial's actors, "
        "the actor classes' schemas (hand-written or derived)",
    )
    parser.add_argument("--environment", help="with --spec: the environment implementation (default: the trial's)")
    parser.add_argument(
        "--episodes", type=int, help="episodes of random actions, each of at most --steps ticks (default 3 with --spec)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=50)
    parser.set_defaults(func=_run_check)


def _run_check(args: argparse.Namespace) -> int:
    from trialog.errors import SpecError
    from trialog.tools.check import check_environment, check_spec

    if (args.entry is None) == (args.spec is None):
        raise SpecError("trialog check: give an environment entry (module:Class) or --spec SPEC, one of the two")
    if args.spec is None and args.environment is not None:
        raise SpecError("trialog check: --environment names an environment of a spec; give --spec too")
    if args.spec is not None:
        report = check_spec(
            args.spec, environment=args.environment, seed=args.seed, steps=args.steps, episodes=args.episodes or 3
        )
    else:
        config = _read_config(args.config)
        report = check_environment(args.entry, config, seed=args.seed, steps=args.steps, episodes=args.episodes or 1)
    print(report)
    return 0 if report.ok else 1


def _read_config(text: str) -> dict[str, Any]:
    if text.startswith("@"):
        import yaml

        with open(text[1:]) as f:
            return yaml.safe_load(f) or {}
    return json.loads(text)
