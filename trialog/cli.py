"""The ``trialog`` command: the SDK's commands, and the services' through an entry point.

Every command that talks to Kafka takes the connection settings as flags, as
``TRIALOG_*`` variables or from a ``--settings`` file (see :mod:`trialog.settings`).

Each SDK command lives in a module of :mod:`trialog.commands` that exposes ``add(sub)``;
:data:`COMMANDS` lists them, in the order ``trialog --help`` shows them. The SDK stands
below the services and never imports them: the services add their commands
(``trialog serve orchestrator`` …) through the ``trialog.commands`` entry point that the
package declares (pyproject.toml). Commands that need an optional extra are always listed
and say how to install it when run.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from importlib.metadata import entry_points

from trialog.commands.serve import ENTRY_POINTS
from trialog.errors import TrialogError
from trialog.telemetry import logs

__all__ = ["COMMANDS", "build_parser", "main"]

# The SDK's command modules, trialog.commands.<name>, in the order `trialog --help` lists them.
COMMANDS = (
    "broker", "trust", "settings", "topics", "serve", "trial", "run", "demo", "check", "conformance", "datalog", "plot",
    "analytics", "deadletters", "train", "models", "judge", "teaming",
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.configure()
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except TrialogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of our output went away (`trialog replay ... | head`): stop quietly, as
        # Unix tools do; stdout goes to /dev/null so the final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trialog", description="Trials of AI agents and humans, carried and logged by Apache Kafka."
    )
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    added = {name: importlib.import_module(f"trialog.commands.{name}").add(sub) for name in COMMANDS}
    for entry in entry_points(group=ENTRY_POINTS):
        # A broken plugin fails loudly here rather than losing its commands in silence.
        entry.load()(sub, added["serve"])
    return parser


if __name__ == "__main__":
    sys.exit(main())
