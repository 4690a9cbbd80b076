"""``trialog serve logger`` (needs the ``datalog`` extra: pyarrow)."""

from __future__ import annotations

import os

from trialog.commands.parts import add_health_port, command, require_extra, run_async
from trialog.errors import TrialogError
from trialog.settings import from_args


def add(serve) -> None:
    p = command(serve, "logger", "Archive every trial of the events topic as Parquet (late rewards as corrections).")
    add_health_port(p, "logger")
    p.add_argument(
        "--archive-dir",
        default=os.environ.get("TRIALOG_ARCHIVE_DIR", ""),
        help="archive folder (or TRIALOG_ARCHIVE_DIR)",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="wait this long after a trial ends for late rewards before archiving it (default 5)",
    )
    p.add_argument(
        "--idle",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="archive a trial with no end after this long without events (default 3600)",
    )
    p.set_defaults(func=_run)


def _run(args) -> int:
    require_extra("pyarrow", "datalog", "trialog serve logger")
    from trialog.bus import connect
    from trialog.services.logger.main import main

    if not args.archive_dir:
        raise TrialogError("no archive folder: pass --archive-dir DIR or set TRIALOG_ARCHIVE_DIR")
    bus = connect(from_args(args))
    run_async(main(bus, args.archive_dir, grace_s=args.grace, idle_s=args.idle, health_port=args.health_port))
    return 0
