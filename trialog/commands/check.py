"""``trialog check``: run an environment through Trialog's contract (:mod:`trialog.tools.check`)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add(sub) -> None:
    """``trialog check ENTRY [--config JSON|@file.yaml] [--seed N] [--steps N]``; exit 1 on failures."""
    parser = sub.add_parser("check", help="Run an environment through Trialog's contract and report what would break.")
    parser.add_argument("entry", help="environment implementation, module:Class")
    parser.add_argument("--config", default="{}", help="environment config: JSON, or @file (JSON or YAML)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=50)
    parser.set_defaults(func=_run_check)


def _run_check(args: argparse.Namespace) -> int:
    from trialog.tools.check import check_environment

    report = check_environment(args.entry, _read_config(args.config), seed=args.seed, steps=args.steps)
    print(report)
    return 0 if report.ok else 1


def _read_config(text: str) -> dict[str, Any]:
    if text.startswith("@"):
        import yaml

        with open(text[1:]) as f:
            return yaml.safe_load(f) or {}
    return json.loads(text)
