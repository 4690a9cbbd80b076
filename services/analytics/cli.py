"""``trialog serve analytics`` (needs the ``analytics`` extra: Quix Streams)."""

from __future__ import annotations

import os

from trialog.commands.parts import add_health_port, command, require_extra
from trialog.settings import from_args


def add(serve) -> None:
    p = command(
        serve,
        "analytics",
        "Run the shipped stream-analytics jobs (Quix Streams) over events; results in compacted analytics.* topics.",
    )
    add_health_port(p, "analytics")
    p.add_argument(
        "--state-dir",
        default=os.environ.get("TRIALOG_ANALYTICS_STATE_DIR", "trialog-analytics-state"),
        help="local state (RocksDB; rebuilt from the changelog topics when lost; default %(default)s)",
    )
    p.add_argument(
        "--window", type=int, default=20, metavar="N", help="rolling means over the last N trials (default %(default)s)"
    )
    p.add_argument(
        "--guarantee",
        choices=["exactly-once", "at-least-once"],
        default="exactly-once",
        help="exactly-once: state, outputs and offsets commit in one Kafka transaction (default)",
    )
    p.set_defaults(func=_run)


def _run(args) -> int:
    require_extra("quixstreams", "analytics", "trialog serve analytics")
    from trialog.services.analytics.app import main

    main(
        from_args(args),
        state_dir=args.state_dir,
        window=args.window,
        guarantee=args.guarantee,
        health_port=args.health_port,
    )
    return 0
