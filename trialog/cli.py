"""The ``trialog`` command.

Every command that talks to Kafka takes the connection settings as flags, as
``TRIALOG_*`` variables or from a ``--settings`` file (see :mod:`trialog.settings`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from typing import Any

import orjson

from trialog import logs
from trialog.errors import TrialogError
from trialog.settings import add_arguments, from_args


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.configure()
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except TrialogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trialog", description="Trials of AI agents and humans, carried and logged by Apache Kafka.")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    from trialog import broker

    broker.add_cli(sub)
    _add_settings(sub)
    _add_topics(sub)
    _add_serve(sub)
    _add_trial(sub)
    _add_run(sub)
    for module in ("trialog.demo", "trialog.check", "trialog.datalog.cli", "trialog.plot"):
        add = _optional_cli(module)
        if add is not None:
            add(sub)
    return parser


def _optional_cli(module: str) -> Callable[[Any], None] | None:
    """Commands whose modules need optional extras register only when importable."""
    import importlib

    try:
        return getattr(importlib.import_module(module), "add_cli", None)
    except ImportError:
        return None


def command(sub, name: str, help: str, *, settings: bool = True) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=help)
    if settings:
        add_arguments(p)
    return p


def run_async(coro) -> Any:
    """Run a command's coroutine, on uvloop when it is installed (see docs/performance.md)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


# --- settings, topics ------------------------------------------------------------------------------


def _add_settings(sub) -> None:
    p = command(sub, "settings", "Print the resolved connection settings (secrets masked) and what each means.")

    def show(args) -> int:
        for name, value, help_text in from_args(args).describe():
            print(f"{name:20} {value:28} {help_text}")
        return 0

    p.set_defaults(func=show)


def _add_topics(sub) -> None:
    topics = sub.add_parser("topics", help="Create or describe the deployment's topics.")
    tsub = topics.add_subparsers(metavar="ACTION")
    create = command(tsub, "create", "Create the topics (idempotent): control and events with equal partitions, trials compacted, events kept.")
    describe = command(tsub, "describe", "Show partitions and the main configs of each topic.")

    def do_create(args) -> int:
        from trialog.bus import connect

        async def go():
            bus = connect(from_args(args))
            created = await bus.create_topics()
            return created, await bus.describe_topics()

        created, described = run_async(go())
        for name, info in sorted(described.items()):
            state = "created" if name in created else "exists"
            print(f"{name:36} {state:8} partitions={info['partitions']} cleanup.policy={info['configs'].get('cleanup.policy')}")
        return 0

    def do_describe(args) -> int:
        from trialog.bus import connect

        described = run_async(connect(from_args(args)).describe_topics())
        if not described:
            print("no Trialog topics here: run `trialog topics create`", file=sys.stderr)
            return 1
        for name, info in sorted(described.items()):
            keys = ("cleanup.policy", "retention.ms", "min.insync.replicas")
            print(f"{name:36} partitions={info['partitions']} " + " ".join(f"{k}={info['configs'].get(k)}" for k in keys))
        return 0

    create.set_defaults(func=do_create)
    describe.set_defaults(func=do_describe)


# --- services --------------------------------------------------------------------------------------


def _spec_files(args) -> list[str]:
    files = [f.strip() for f in from_args(args).spec.split(",") if f.strip()]
    if not files:
        raise TrialogError("no spec: pass --spec FILE or set TRIALOG_SPEC (the orchestrator takes several, comma-separated)")
    return files


def _add_serve(sub) -> None:
    serve = sub.add_parser("serve", help="Run a Trialog service (orchestrator, environment, actors, logger, gateway).")
    ssub = serve.add_subparsers(metavar="SERVICE")

    def common(p) -> None:
        p.add_argument("--health-port", type=int, default=8080, help="HTTP port for /livez and /readyz (0: off; default 8080)")

    orch = command(ssub, "orchestrator", "Validate start requests, start and end trials, keep the trials index.")
    common(orch)
    env = command(ssub, "environment", "Host environment implementations (one consumer group each).")
    common(env)
    env.add_argument("--implementation", action="append", default=[], metavar="NAME", help="serve only these (repeatable; default all)")
    act = command(ssub, "actors", "Play actor implementations (one consumer group each).")
    common(act)
    act.add_argument("--implementation", action="append", default=[], metavar="NAME", help="serve only these (repeatable; default all non-client)")

    def do_orchestrator(args) -> int:
        from services.orchestrator.main import main as run
        from trialog.bus import connect
        from trialog.spec import load_spec

        bus = connect(from_args(args))
        specs = [load_spec(f, bus.store) for f in _spec_files(args)]
        run_async(run(bus, specs, health_port=args.health_port))
        return 0

    def hosted(module: str) -> Callable[[Any], int]:
        def do(args) -> int:
            import importlib

            from trialog.bus import connect
            from trialog.spec import load_spec

            bus = connect(from_args(args))
            files = _spec_files(args)
            if len(files) != 1:
                raise TrialogError("environment and actor services take exactly one --spec")
            spec = load_spec(files[0], bus.store)
            run_async(importlib.import_module(module).main(bus, spec, args.implementation, health_port=args.health_port))
            return 0

        return do

    orch.set_defaults(func=do_orchestrator)
    env.set_defaults(func=hosted("services.environment.host"))
    act.set_defaults(func=hosted("services.actors.host"))
    for module in ("services.logger.cli", "services.gateway.cli"):
        add = _optional_cli(module)
        if add is not None:
            add(ssub)


# --- trials ------------------------------------------------------------------------------------------


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


def _add_trial_overrides(p) -> None:
    p.add_argument("--seed", type=int, help="trial seed (default: the spec's, else derived from the trial ID)")
    p.add_argument("--implementation", action="append", default=[], metavar="ACTOR=IMPL", help="play ACTOR with IMPL (repeatable)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="user parameter (JSON value or string; repeatable)")
    p.add_argument("--max-ticks", type=int)
    p.add_argument("--experiment", default="", help="label the trial(s) with an experiment name (recorded in the log)")
    p.add_argument("--phase", default="", help="label the trial(s) with an experiment phase: heatup, train or evaluate")


def _overrides(args) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if args.seed is not None:
        out["seed"] = args.seed
    if args.implementation:
        out["implementations"] = {k: str(v) for k, v in _pairs(args.implementation, "--implementation").items()}
    if args.param:
        out["parameters"] = _pairs(args.param, "--param")
    if args.max_ticks:
        out["max_ticks"] = args.max_ticks
    if args.experiment:
        out["experiment"] = args.experiment
    if args.phase:
        out["phase"] = args.phase
    return out


def _add_trial(sub) -> None:
    trial = sub.add_parser("trial", help="Start, terminate, watch and list trials.")
    tsub = trial.add_subparsers(metavar="ACTION")
    start = command(tsub, "start", "Ask the orchestrator for a trial; prints its ID (and waits for its end with --wait).")
    start.add_argument("spec_name", metavar="SPEC", help="name of a spec the orchestrator serves")
    _add_trial_overrides(start)
    start.add_argument("--wait", action="store_true", help="wait for the end and print the reason")
    term = command(tsub, "terminate", "End a trial: soft (at the next tick) or --hard (now).")
    term.add_argument("trial_id")
    term.add_argument("--hard", action="store_true")
    term.add_argument("--reason", default="")
    watch = command(tsub, "watch", "Print trials' status changes as they happen (Ctrl-C to stop).")
    watch.add_argument("trial_id", nargs="?", help="only this trial (exit when it ends)")
    lst = command(tsub, "list", "List trials from the trials index.")
    lst.add_argument("--status", help="only trials with this status (pending, running, ended, rejected)")

    def do_start(args) -> int:
        from trialog.bus import connect
        from trialog.controller import Controller

        async def go():
            async with Controller(connect(from_args(args))) as ctl:
                tid = await ctl.start_trial(args.spec_name, **_overrides(args))
                started = await ctl.wait_started(tid)
                print(tid, flush=True)
                if args.wait:
                    ended = await ctl.wait_ended(tid)
                    print(f"{tid} ended: {ended.reason} at tick {ended.tick}")
                return started

        run_async(go())
        return 0

    def do_terminate(args) -> int:
        from trialog.bus import connect
        from trialog.controller import Controller

        async def go():
            async with Controller(connect(from_args(args))) as ctl:
                await ctl.terminate(args.trial_id, hard=args.hard, reason=args.reason)

        run_async(go())
        print(f"terminate ({'hard' if args.hard else 'soft'}) requested for {args.trial_id}")
        return 0

    def do_watch(args) -> int:
        from trialog.bus import connect
        from trialog.controller import Controller
        from trialog.events import TrialEnded

        async def go():
            async with Controller(connect(from_args(args))) as ctl:
                async for event in ctl.watch():
                    if args.trial_id and event.trial_id != args.trial_id:
                        continue
                    detail = getattr(event, "reason", "") or ""
                    print(f"{event.trial_id} {event.KIND} {detail}".rstrip(), flush=True)
                    if args.trial_id and isinstance(event, TrialEnded):
                        return

        run_async(go())
        return 0

    def do_list(args) -> int:
        from trialog.bus import connect
        from trialog.controller import Controller

        async def go():
            async with Controller(connect(from_args(args))) as ctl:
                return await ctl.list_trials()

        records = [r for r in run_async(go()) if not args.status or r.status == args.status]
        print(f"{'trial':24} {'spec':12} {'status':9} {'ticks':>6} reason")
        for r in records:
            print(f"{r.trial_id:24} {r.spec:12} {r.status:9} {r.ticks:>6} {r.reason}")
        return 0

    start.set_defaults(func=do_start)
    term.set_defaults(func=do_terminate)
    watch.set_defaults(func=do_watch)
    lst.set_defaults(func=do_list)


def _add_run(sub) -> None:
    p = command(sub, "run", "Run a campaign of trials from a spec file, with progress and a summary.")
    p.add_argument("spec_file", metavar="SPEC", help="the spec file")
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--serve", action="store_true", help="also run the services for this spec locally for the campaign's duration")
    p.add_argument("--environment-processes", type=int, default=1, help="with --serve: environment service processes")
    p.add_argument("--actor-processes", type=int, default=1, help="with --serve: actor service processes")
    p.add_argument("--plot", default="trialog-plots/returns.png", metavar="FILE.png", help="where the returns plot goes, data beside it (default: %(default)s; '': none)")
    _add_trial_overrides(p)

    def do_run(args) -> int:
        from trialog.campaign import run_from_cli

        return run_from_cli(args, from_args(args))

    p.set_defaults(func=do_run)


if __name__ == "__main__":
    sys.exit(main())
