"""``trialog serve actors``."""

from __future__ import annotations

from trialog.commands.parts import add_implementation_host


def _main():
    from trialog.services.actors.main import main

    return main


def add(serve) -> None:
    add_implementation_host(
        serve,
        "actors",
        "Play actor implementations (one consumer group each).",
        "all but client and external ones",
        _main,
    )
