"""``trialog serve``: its subcommands come from the services, through the ``trialog.commands``
entry point (pyproject.toml; services/cli.py), never from an import of theirs."""

from __future__ import annotations

import argparse

from trialog.errors import TrialogError

# The entry point group through which the services add `trialog serve SERVICE` (pyproject.toml).
ENTRY_POINTS = "trialog.commands"


def add(sub) -> argparse._SubParsersAction:
    """Add ``serve`` and return its subparsers, to which the entry point adds the services."""
    serve = sub.add_parser(
        "serve", help="Run a Trialog service (orchestrator, environment, actors, logger, gateway, learner)."
    )

    def no_service(args) -> int:
        raise TrialogError(
            "name a service (`trialog serve --help`); if none is listed, the services' commands are not "
            f"registered: reinstall the package (pip install -e .) so that its {ENTRY_POINTS!r} entry point exists"
        )

    serve.set_defaults(func=no_service)
    return serve.add_subparsers(metavar="SERVICE")
