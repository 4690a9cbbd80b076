"""``trialog replay`` and ``trialog export`` (they need the ``datalog`` extra: pyarrow)."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from trialog.commands.parts import command, require_extra, run_async
from trialog.errors import TrialogError
from trialog.settings import from_args


def add(sub) -> None:
    replay = command(
        sub,
        "replay",
        "Print the samples of a trial (one line per tick and actor), from the events topic or an archive.",
    )
    replay.add_argument("trial_id", metavar="TRIAL_ID")
    replay.add_argument(
        "--follow", action="store_true", help="tail a live trial: print each sample as soon as it is complete"
    )
    replay.add_argument("--from-archive", metavar="DIR", help="read the logger's archive instead of the topic")
    replay.add_argument("--json", action="store_true", help="one JSON object per line")
    replay.add_argument(
        "--verify",
        action="store_true",
        help="re-simulate the logged actions in a fresh environment, the one --spec FILE declares "
        "under the trial's environment name (never an import path from the log); exit 1 at the first difference",
    )
    replay.set_defaults(func=_replay)

    export = command(sub, "export", "Write trials as one Parquet file, one row per (trial, tick, actor).")
    export.add_argument("--out", required=True, metavar="FILE.parquet")
    export.add_argument("--implementation", metavar="NAME", help="only rows of actors played by this implementation")
    export.add_argument(
        "--since", type=_instant, metavar="ISO", help="only trials started at or after (ISO 8601; UTC when no zone)"
    )
    export.add_argument("--until", type=_instant, metavar="ISO", help="only trials started before")
    export.add_argument(
        "--status", help="only trials with this status (index: ended, running…; archive: ended, unended)"
    )
    export.add_argument("--from-archive", metavar="DIR", help="read the logger's archive instead of the topics")
    export.set_defaults(func=_export)


def _instant(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 date or time: {exc}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _line(sample, as_json: bool) -> str:
    from trialog.datalog.samples import to_json_text

    if as_json:
        return to_json_text(sample.to_json())
    flags = "".join(f" {name}" for name in ("terminated", "truncated", "final", "timed_out") if getattr(sample, name))
    action = "-" if sample.action_avro is None else to_json_text(sample.action)
    return (
        f"{sample.tick:>5} {sample.actor:12} action={action} reward={sample.reward:g} "
        f"({len(sample.reward_sources)} sources){flags} obs={to_json_text(sample.observation)}"
    )


def _warn(problems: list[str]) -> None:
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)


def _replay(args) -> int:
    from trialog.bus import connect
    from trialog.datalog.replay import read_trial, replay
    from trialog.datalog.verify import verify

    spec = _local_spec(args) if args.verify else None
    if args.from_archive:
        require_extra("pyarrow", "datalog", "trialog replay --from-archive")
        from trialog.datalog.archive import Archive

        if args.follow:
            raise TrialogError("--follow reads the topic; an archive holds finished trials only")
        archive = Archive(args.from_archive)
        trial = archive.read(args.trial_id)
        _warn(trial.entry["problems"])
        if args.verify:
            return _verdict(
                verify(trial.started, trial.samples, archive.store, spec, trial.entry.get("parameter_changes", ()))
            )
        for sample in trial.samples:
            print(_line(sample, args.json))
        return 0

    bus = connect(from_args(args))

    async def go() -> int:
        async with bus:
            if args.verify or not args.follow:
                fold = await read_trial(bus, args.trial_id)
                if fold.started is None:
                    raise TrialogError(f"trial {args.trial_id} has no trial.started in {bus.settings.topic('events')}")
                _warn(fold.check())
                if args.verify:
                    return _verdict(verify(fold.started, fold.samples(), bus.store, spec, fold.parameter_changes))
                for sample in fold.samples():
                    print(_line(sample, args.json))
                return 0
            async for sample in replay(bus, args.trial_id, follow=True):
                print(_line(sample, args.json), flush=True)
            return 0

    return run_async(go())


def _local_spec(args):
    """The spec ``replay --verify`` takes the environment from (a record names no code, I-9)."""
    from trialog.protocol.codec import SchemaStore
    from trialog.spec import load_spec

    if not args.spec:
        raise TrialogError(
            "--verify re-simulates with an environment a local spec declares: "
            "pass --spec FILE (the spec the environment service runs)"
        )
    return load_spec(args.spec.split(",")[0], SchemaStore.with_builtin())


def _verdict(verdict) -> int:
    print(verdict)
    return 0 if verdict.ok else 1


def _spec_name(value: str | None) -> str | None:
    """``--spec`` (the settings flag, read from the command line only) filters exports by
    spec name; a spec file stands for the name it declares."""
    if not value or not value.endswith((".yaml", ".yml")):
        return value
    from trialog.protocol.codec import SchemaStore
    from trialog.spec import load_spec

    return load_spec(value, SchemaStore.with_builtin()).name


def _export(args) -> int:
    require_extra("pyarrow", "datalog", "trialog export")
    from trialog.datalog.export import Filters, export_from_archive, export_from_topic

    filters = Filters(
        spec=_spec_name(args.spec),
        implementation=args.implementation,
        since_ms=args.since,
        until_ms=args.until,
        status=args.status,
    )
    if args.from_archive:
        from trialog.datalog.archive import Archive

        summary = export_from_archive(Archive(args.from_archive), args.out, filters)
    else:
        from trialog.bus import connect

        async def go():
            async with connect(from_args(args)) as bus:
                return await export_from_topic(bus, args.out, filters)

        summary = run_async(go())
    for tid, problems in summary.problems.items():
        _warn([f"{tid}: {p}" for p in problems])
    print(f"{summary.rows} rows from {summary.trials} trial(s) written to {args.out}")
    return 0
