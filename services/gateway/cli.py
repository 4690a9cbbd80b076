"""``trialog serve gateway`` (needs the ``gateway`` extra: Starlette and uvicorn)."""

from __future__ import annotations

import os

from trialog.commands.parts import add_health_port, command, require_extra, run_async, spec_files
from trialog.services.gateway.door import Limits
from trialog.settings import from_args


def add(serve) -> None:
    p = command(serve, "gateway", "Serve the pages for people and bridge their WebSockets to trial events.")
    p.add_argument(
        "--host",
        default=os.environ.get("TRIALOG_GATEWAY_HOST", "127.0.0.1"),
        help="address to listen on (default 127.0.0.1; 0.0.0.0 in a container)",
    )
    p.add_argument(
        "--port", type=int, default=int(os.environ.get("TRIALOG_GATEWAY_PORT", "8000")), help="HTTP port (default 8000)"
    )
    # Probes and metrics on their own port, like every service (the web port answers /livez and /readyz too).
    add_health_port(p, "gateway")
    p.add_argument(
        "--pages",
        default=os.environ.get("TRIALOG_GATEWAY_PAGES"),
        metavar="DIR",
        help="a folder of page modules: the module an environment's spec names (page: FILE.js), else "
        "DIR/<environment>.js, draws that environment's trials instead of the shipped page (docs/humans.md)",
    )
    Limits.add_flags(p)

    def do_gateway(args) -> int:
        require_extra("starlette", "gateway", "trialog serve gateway")
        require_extra("uvicorn", "gateway", "trialog serve gateway")
        from trialog.bus import connect
        from trialog.services.gateway.app import main
        from trialog.spec import load_spec

        try:
            limits = Limits.from_args(args)
        except ValueError as exc:
            raise SystemExit(f"trialog serve gateway: {exc}") from None
        if args.pages is not None and not os.path.isdir(args.pages):
            raise SystemExit(f"trialog serve gateway: --pages {args.pages}: not a folder")
        settings = from_args(args)
        bus = connect(settings)
        specs = {s.name: s for s in (load_spec(f, bus.store) for f in spec_files(args))}
        # Join links the lobby hands out start with --gateway-url (where people reach this gateway).
        run_async(
            main(
                bus,
                specs,
                host=args.host,
                port=args.port,
                base_url=settings.gateway_url,
                health_port=args.health_port,
                limits=limits,
                pages=args.pages,
            )
        )
        return 0

    p.set_defaults(func=do_gateway)
