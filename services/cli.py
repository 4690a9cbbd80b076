"""The services' commands (``trialog serve …``), added to the ``trialog`` command
through the ``trialog.commands`` entry point (pyproject.toml): the SDK's command
line never imports a service; each service brings its own command."""

from __future__ import annotations

import argparse

from trialog.services.actors import cli as actors
from trialog.services.analytics import cli as analytics
from trialog.services.environment import cli as environment
from trialog.services.gateway import cli as gateway
from trialog.services.learner import cli as learner
from trialog.services.logger import cli as logger
from trialog.services.orchestrator import cli as orchestrator


def add_commands(sub: argparse._SubParsersAction, serve: argparse._SubParsersAction) -> None:
    """Called by :func:`trialog.cli.build_parser` with the top-level and the ``serve`` subcommands."""
    for service in (orchestrator, environment, actors, logger, gateway, learner, analytics):
        service.add(serve)
