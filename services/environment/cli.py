"""``trialog serve environment``."""

from __future__ import annotations

from trialog.commands.parts import add_implementation_host


def _main():
    from trialog.services.environment.main import main

    return main


def add(serve) -> None:
    add_implementation_host(
        serve,
        "environment",
        "Host environment implementations (one consumer group each).",
        "all but external ones",
        _main,
    )
