"""``trialog trial start|terminate|watch|list``: trials, through a :class:`trialog.controller.Controller`."""

from __future__ import annotations

from trialog.commands.parts import add_trial_overrides, command, fields_of, json_line, run_async, trial_overrides
from trialog.errors import TrialError
from trialog.settings import from_args


def add(sub) -> None:
    trial = sub.add_parser("trial", help="Start, terminate, watch and list trials.")
    tsub = trial.add_subparsers(metavar="ACTION")
    start = command(
        tsub, "start", "Ask the orchestrator for a trial; prints its ID (and waits for its end with --wait)."
    )
    start.add_argument("spec_name", metavar="SPEC", help="name of a spec the orchestrator serves")
    add_trial_overrides(start, seed_help="trial seed (default: the spec's, else derived from the trial ID)")
    start.add_argument("--wait", action="store_true", help="wait for the end and print the reason")
    start.add_argument(
        "--start-timeout", type=float, default=60.0, metavar="SECONDS",
        help="give up when no orchestrator answers within this long (default 60)",
    )  # fmt: skip
    start.add_argument(
        "--seat", action="append", default=[], metavar="ACTOR",
        help="print a join link for ACTOR, played by a person "
        "(repeatable; default: the client actors the --spec file names)",
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
        from trialog.protocol.topics import TRIALS

        settings = from_args(args)
        overrides = trial_overrides(args)
        seats = args.seat or _seats_from_specs(settings, args.spec_name, overrides.get("implementations"))

        async def go():
            # Its start and end from the trials index, a few records a trial: following `events`
            # it would fetch every record of every trial on the topic while it waits.
            async with Controller(connect(settings), follow=TRIALS) as ctl:
                tid = await ctl.start_trial(args.spec_name, **overrides)
                # The ID and the links first: the trial waits for these people to join.
                print(tid, flush=True)
                for actor, url in ctl.join_links(tid, seats).items():
                    print(f"{actor}: {url}", flush=True)
                started = await ctl.wait_started(tid, timeout=None if seats else args.start_timeout)
                if args.wait:
                    ended = await ctl.wait_result(tid)
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
            async with Controller(connect(from_args(args)), watch=False) as ctl:  # the index, and a request
                record = await ctl.trial_record(args.trial_id)
                if record is None:
                    topic = ctl.bus.settings.topic("trials")
                    problem = f"no trial {args.trial_id} in {topic}: check the ID and the topic prefix"
                    raise TrialError(problem, trial_id=args.trial_id)
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
            async with Controller(connect(from_args(args)), watch=False) as ctl:  # the index only
                return await ctl.list_trials()

        records = [r for r in run_async(go()) if not args.status or r.status == args.status]
        if args.json:
            for r in records:
                print(json_line(fields_of(r)))
            return 0
        # The table's columns stay as scripts read them (`read trial spec status ticks reason`);
        # --json has every field, the returns too.
        print(f"{'trial':24} {'spec':12} {'status':9} {'ticks':>6} reason")
        for r in records:
            print(f"{r.trial_id:24} {r.spec:12} {r.status:9} {r.ticks:>6} {r.reason}")
        return 0

    start.set_defaults(func=do_start)
    term.set_defaults(func=do_terminate)
    watch.set_defaults(func=do_watch)
    lst.set_defaults(func=do_list)
