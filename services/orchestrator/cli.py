"""``trialog serve orchestrator``."""

from __future__ import annotations

from trialog.commands.parts import add_health_port, command, run_async, spec_files
from trialog.settings import from_args


def add(serve) -> None:
    p = command(serve, "orchestrator", "Validate start requests, start and end trials, keep the trials index.")
    add_health_port(p, "orchestrator")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from trialog.bus import connect
    from trialog.services.orchestrator.main import main
    from trialog.spec import load_spec

    bus = connect(from_args(args))
    specs = [load_spec(f, bus.store) for f in spec_files(args)]
    run_async(main(bus, specs, health_port=args.health_port))
    return 0
