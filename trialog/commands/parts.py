"""The building blocks of ``trialog`` commands, shared by every module that adds one.

:mod:`trialog.cli` assembles the command line; the SDK's own command modules
(campaigns, the datalog, checks) and the services' (registered through the
``trialog.commands`` entry point, see :func:`trialog.cli.build_parser`) build on
what is here, so that none of them imports the assembler and the SDK never
imports a service.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

import orjson

from trialog.errors import TrialogError
from trialog.runtime.process import run_async  # noqa: F401 - the commands' way to run a coroutine
from trialog.settings import add_arguments


def command(sub, name: str, help: str, *, settings: bool = True) -> argparse.ArgumentParser:
    """A subcommand with the connection settings as flags (unless ``settings=False``)."""
    p = sub.add_parser(name, help=help, description=help)
    if settings:
        add_arguments(p)
    return p


def json_line(value: Any) -> str:
    """One line of JSON for ``--json`` output: dataclasses (events, records) as objects,
    mappings as objects, bytes as base64, paths and anything else as text."""
    import base64
    from collections.abc import Mapping

    def fallback(obj: Any) -> Any:
        if isinstance(obj, bytes):
            return base64.b64encode(obj).decode()
        if isinstance(obj, Mapping):
            return dict(obj)
        return str(obj)

    return orjson.dumps(value, default=fallback).decode()


def fields_of(record: Any) -> dict[str, Any]:
    """A dataclass's fields, one level deep (for ``--json``: json_line renders the rest)."""
    import dataclasses

    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


def require_extra(module: str, extra: str, what: str) -> None:
    """Fail with the install command when an optional extra is missing.

    Commands that need an extra are always listed; they import it when they run,
    so that a missing extra says how to get it instead of hiding the command."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise TrialogError(f"{what} needs the {extra!r} extra ({exc}): pip install 'trialog[{extra}]'") from exc


# --- trial overrides: the flags of `trial start` and `run` -------------------------------------


def _pairs(items: list[str], what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TrialogError(f"{what} {item!r} must look like key=value")
        try:
            out[key] = orjson.loads(value)
        except orjson.JSONDecodeError:
            out[key] = value
    return out


def add_trial_overrides(p: argparse.ArgumentParser, *, seed_help: str) -> None:
    p.add_argument("--seed", type=int, help=seed_help)
    p.add_argument(
        "--implementation", action="append", default=[], metavar="ACTOR=IMPL", help="play ACTOR with IMPL (repeatable)"
    )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="user parameter (JSON value or string; repeatable)",
    )
    p.add_argument("--max-ticks", type=positive_int, metavar="N", help="end the trial after N ticks (at least 1)")
    p.add_argument("--experiment", default="", help="label the trial(s) with an experiment name (recorded in the log)")
    p.add_argument("--phase", default="", help="label the trial(s) with an experiment phase: heatup, train or evaluate")


def trial_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ``start_trial`` keyword arguments the override flags ask for."""
    out: dict[str, Any] = {}
    if args.seed is not None:
        out["seed"] = args.seed
    if args.implementation:
        out["implementations"] = {k: str(v) for k, v in _pairs(args.implementation, "--implementation").items()}
    if args.param:
        out["parameters"] = _pairs(args.param, "--param")
    if args.max_ticks is not None:
        out["max_ticks"] = args.max_ticks
    if args.experiment:
        out["experiment"] = args.experiment
    if args.phase:
        out["phase"] = args.phase
    return out


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1 (counts, limits)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def spec_files(args: argparse.Namespace) -> list[str]:
    """The spec files of ``--spec`` (comma-separated) or ``TRIALOG_SPEC``."""
    from trialog.settings import from_args

    files = [f.strip() for f in from_args(args).spec.split(",") if f.strip()]
    if not files:
        raise TrialogError(
            "no spec: pass --spec FILE or set TRIALOG_SPEC (the orchestrator takes several, comma-separated)"
        )
    return files


# Each service's own default health port, so that one of each runs on one host without
# flags; a second instance of a service on the same host needs --health-port (or 0).
HEALTH_PORTS = {
    "orchestrator": 8080,
    "environment": 8081,
    "actors": 8082,
    "learner": 8083,
    "logger": 8084,
    "gateway": 8085,
    "analytics": 8086,
}


def add_health_port(p: argparse.ArgumentParser, service: str) -> None:
    """The flag every ``trialog serve`` command takes."""
    port = HEALTH_PORTS[service]
    p.add_argument(
        "--health-port",
        type=int,
        default=port,
        help=f"HTTP port for /livez, /readyz and /metrics on the health_host setting (0: off; default {port})",
    )


def add_implementation_host(serve, name: str, help: str, default: str, main_of: Callable[[], Any]) -> None:
    """``trialog serve NAME --spec FILE [--implementation IMPL]...``: a service hosting some
    implementations of one spec. ``main_of`` returns the service's ``main(bus, spec,
    implementations, health_port=...)``; it is imported only when the command runs."""
    p = command(serve, name, help)
    add_health_port(p, name)
    p.add_argument(
        "--implementation",
        action="append",
        default=[],
        metavar="IMPL",
        help=f"serve only these (repeatable; default {default})",
    )

    def run(args: argparse.Namespace) -> int:
        from trialog.bus import connect
        from trialog.settings import from_args
        from trialog.spec import load_spec

        files = spec_files(args)
        if len(files) != 1:
            raise TrialogError(f"the {name} service takes exactly one --spec")
        bus = connect(from_args(args))
        run_async(main_of()(bus, load_spec(files[0], bus.store), args.implementation, health_port=args.health_port))
        return 0

    p.set_defaults(func=run)
