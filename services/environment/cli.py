"""``trialog serve environment``."""

from __future__ import annotations

from trialog.commands import add_implementation_host


def _main():
    from trialog.services.environment.host import main

    return main


def add_cli(serve) -> None:
    add_implementation_host(serve, "environment", "Host environment implementations (one consumer group each).", "all but external ones", _main)
