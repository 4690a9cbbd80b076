"""``trialog serve environment``."""

from __future__ import annotations

from trialog.commands import add_health_port, command, run_async, spec_files
from trialog.errors import TrialogError
from trialog.settings import from_args


def add_cli(serve) -> None:
    p = command(serve, "environment", "Host environment implementations (one consumer group each).")
    add_health_port(p)
    p.add_argument("--implementation", action="append", default=[], metavar="NAME", help="serve only these (repeatable; default all)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from services.environment.host import main
    from trialog.bus import connect
    from trialog.spec import load_spec

    bus = connect(from_args(args))
    files = spec_files(args)
    if len(files) != 1:
        raise TrialogError("the environment service takes exactly one --spec")
    spec = load_spec(files[0], bus.store)
    run_async(main(bus, spec, args.implementation, health_port=args.health_port))
    return 0
