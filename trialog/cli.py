"""The ``trialog`` command: the SDK's commands, and the services' through an entry point.

Every command that talks to Kafka takes the connection settings as flags, as
``TRIALOG_*`` variables or from a ``--settings`` file (see :mod:`trialog.settings`).

The SDK stands below the services and never imports them: the services add their
commands (``trialog serve orchestrator`` …) through the ``trialog.commands.parts`` entry
point that the package declares (pyproject.toml). Commands that need an optional
extra are always listed and say how to install it when run.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import entry_points

from trialog.telemetry import logs
from trialog.commands.parts import add_trial_overrides, command, fields_of, json_line, positive_int, run_async, trial_overrides
from trialog.errors import TrialError, TrialogError
from trialog.settings import from_args

__all__ = ["build_parser", "command", "main", "run_async"]

ENTRY_POINTS = "trialog.commands"


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
    except BrokenPipeError:
        # The reader of our output went away (`trialog replay ... | head`): stop quietly, as
        # Unix tools do; stdout goes to /dev/null so the final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trialog", description="Trials of AI agents and humans, carried and logged by Apache Kafka.")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    from trialog import analytics, broker
    from trialog.tools import check, conformance, demo, plot
    from trialog.protocol import owners as deadletters
    from trialog.learn import train
    from trialog.commands import datalog as datalog_cli

    broker.add_cli(sub)
    from trialog import trust

    trust.add_cli(sub)
    _add_settings(sub)
    _add_topics(sub)
    serve = _add_serve(sub)
    _add_trial(sub)
    _add_run(sub)
    for module in (demo, check, conformance, datalog_cli, plot, analytics, deadletters, train):
        module.add_cli(sub)
    for entry in entry_points(group=ENTRY_POINTS):
        # A broken plugin fails loudly here rather than losing its commands in silence.
        entry.load()(sub, serve)
    return parser


# --- settings, topics ------------------------------------------------------------------------------


def _add_settings(sub) -> None:
    p = command(sub, "settings", "Print the resolved connection settings (secrets masked) and what each means.")

    p.add_argument("--json", action="store_true", help="one JSON object: name → {value, help} (secrets masked)")

    def show(args) -> int:
        rows = from_args(args).describe()
        if args.json:
            print(json_line({name: {"value": value, "help": help_text} for name, value, help_text in rows}))
            return 0
        for name, value, help_text in rows:
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
            keys = ("cleanup.policy", "retention.ms", "min.insync.replicas", "max.message.bytes")
            print(f"{name:36} partitions={info['partitions']} " + " ".join(f"{k}={info['configs'].get(k)}" for k in keys))
        return 0

    create.set_defaults(func=do_create)
    describe.set_defaults(func=do_describe)


# --- services --------------------------------------------------------------------------------------


def _add_serve(sub):
    """``trialog serve``: its subcommands come from the services (entry point ``trialog.commands.parts``)."""
    serve = sub.add_parser("serve", help="Run a Trialog service (orchestrator, environment, actors, logger, gateway, learner).")

    def no_service(args) -> int:
        raise TrialogError(
            "name a service (`trialog serve --help`); if none is listed, the services' commands are not "
            f"registered: reinstall the package (pip install -e .) so that its {ENTRY_POINTS!r} entry point exists"
        )

    serve.set_defaults(func=no_service)
    return serve.add_subparsers(metavar="SERVICE")


# --- trials ------------------------------------------------------------------------------------------


def _add_trial(sub) -> None:
    trial = sub.add_parser("trial", help="Start, terminate, watch and list trials.")
    tsub = trial.add_subparsers(metavar="ACTION")
    start = command(tsub, "start", "Ask the orchestrator for a trial; prints its ID (and waits for its end with --wait).")
    start.add_argument("spec_name", metavar="SPEC", help="name of a spec the orchestrator serves")
    add_trial_overrides(start, seed_help="trial seed (default: the spec's, else derived from the trial ID)")
    start.add_argument("--wait", action="store_true", help="wait for the end and print the reason")
    start.add_argument("--start-timeout", type=float, default=60.0, metavar="SECONDS", help="give up when no orchestrator answers within this long (default 60)")
    start.add_argument(
        "--seat", action="append", default=[], metavar="ACTOR",
        help="print a join link for ACTOR, played by a person (repeatable; default: the client actors the --spec file names)",
    )  # fmt: skip
    term = command(tsub, "terminate", "End a trial: soft (at the next tick) or --hard (now).")
    term.add_argument("trial_id")
    term.add_argument("--hard", action="store_true")
    term.add_argument("--reason", default="")
    watch = command(tsub, "watch", "Print trials' status changes as they happen (Ctrl-C to stop).")
    watch.add_argument("trial_id", nargs="?", help="only this trial (exit when it ends)")
    watch.add_argument("--json", action="store_true", help="one JSON object per event: its kind and fields")
    lst = command(tsub, "list", "List trials from the trials index.")
    lst.add_argument("--status", help="only trials with this status (pending, running, ended, rejected)")
    lst.add_argument("--json", action="store_true", help="one JSON object per trial: its record in the trials index")

    def do_start(args) -> int:
        from trialog.bus import connect
        from trialog.controller import Controller

        settings = from_args(args)
        overrides = trial_overrides(args)
        seats = args.seat or _seats_from_specs(settings, args.spec_name, overrides.get("implementations"))

        async def go():
            async with Controller(connect(settings)) as ctl:
                tid = await ctl.start_trial(args.spec_name, **overrides)
                # The ID and the links first: the trial waits for these people to join.
                print(tid, flush=True)
                for actor, url in ctl.join_links(tid, seats).items():
                    print(f"{actor}: {url}", flush=True)
                started = await ctl.wait_started(tid, timeout=None if seats else args.start_timeout)
                if args.wait:
                    ended = await ctl.wait_ended(tid)
                    print(f"{tid} ended: {ended.reason} at tick {ended.tick}")
                return started

        run_async(go())
        return 0

    def _seats_from_specs(settings, spec_name: str, implementations) -> list[str]:
        from trialog.spec import load_spec

        files = [f.strip() for f in settings.spec.split(",") if f.strip()]
        for spec in (load_spec(f) for f in files):
            if spec.name == spec_name:
                return spec.seats(implementations)
        return []

    def do_terminate(args) -> int:
        from trialog.bus import connect
        from trialog.controller import Controller

        async def go():
            async with Controller(connect(from_args(args))) as ctl:
                record = await ctl.trial_record(args.trial_id)
                if record is None:
                    raise TrialError(f"no trial {args.trial_id} in {ctl.bus.settings.topic('trials')}: check the ID and the topic prefix", trial_id=args.trial_id)
                if record.status in ("ended", "rejected"):
                    return record
                await ctl.terminate(args.trial_id, hard=args.hard, reason=args.reason)
                return record

        record = run_async(go())
        if record.status in ("ended", "rejected"):
            print(f"{args.trial_id} is already {record.status} ({record.reason}): nothing to terminate")
            return 0
        print(f"terminate ({'hard' if args.hard else 'soft'}) requested for {args.trial_id}")
        return 0

    def do_watch(args) -> int:
        from trialog.bus import connect
        from trialog.controller import Controller
        from trialog.protocol.events import TrialEnded

        async def go():
            async with Controller(connect(from_args(args))) as ctl:
                async for event in ctl.watch():
                    if args.trial_id and event.trial_id != args.trial_id:
                        continue
                    if args.json:
                        print(json_line({"kind": event.KIND, **fields_of(event)}), flush=True)
                    else:
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
        if args.json:
            for r in records:
                print(json_line(fields_of(r)))
            return 0
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
    p.add_argument("--trials", type=positive_int, default=10, metavar="N", help="how many trials (default 10)")
    p.add_argument("--concurrency", type=positive_int, default=4, metavar="N", help="trials running at once (default 4)")
    p.add_argument("--serve", action="store_true", help="also run the services for this spec locally for the campaign's duration")
    p.add_argument("--environment-processes", type=positive_int, default=1, metavar="N", help="with --serve: environment service processes")
    p.add_argument("--actor-processes", type=positive_int, default=1, metavar="N", help="with --serve: actor service processes")
    p.add_argument("--plot", default="trialog-plots/returns.png", metavar="FILE.png", help="where the returns plot goes, data beside it (default: %(default)s; '': none)")
    add_trial_overrides(p, seed_help="trial i of the campaign gets seed N+i (default: each trial's seed is the spec's, else derived from its trial ID)")

    def do_run(args) -> int:
        from trialog.tools.campaign import run_from_cli

        return run_from_cli(args, from_args(args))

    p.set_defaults(func=do_run)


if __name__ == "__main__":
    sys.exit(main())
