"""``trialog judge``: rate the gateway's running trials late, as a person on the watch page
does (:mod:`trialog.tools.judge`)."""

from __future__ import annotations

import asyncio
import signal

from trialog.commands.parts import command, require_extra, run_async
from trialog.errors import TrialogError


def add(sub) -> None:
    p = command(
        sub,
        "judge",
        "Watch the gateway's running trials and rate each step late, as a person judging on the watch page: "
        "rewards from person:NAME, a few ticks after the tick they rate.",
        settings=False,
    )
    p.add_argument(
        "rate",
        metavar="MODULE:FUNCTION",
        help="rate(before, after, final) -> a number or None: an actor's observations at t and t+1 "
        "(e.g. trialog.examples.cartpole.judge:upright)",
    )
    p.add_argument("--gateway", default="http://127.0.0.1:8000", help="the gateway's URL (default: %(default)s)")
    p.add_argument("--name", default="judge", help="the judge's name: its rewards come from person:NAME")
    p.add_argument("--lag", type=int, default=5, help="ticks after the rated one before the rating is sent (late)")
    p.add_argument("--confidence", type=float, default=0.8, help="the confidence of each rating, in (0, 1]")
    p.add_argument("--trial-spec", metavar="SPEC", help="judge only the trials of this spec (its name)")
    p.add_argument("--experiment", help="judge only the trials of this experiment (a preset's name)")
    p.add_argument(
        "--phase", action="append", default=[], help="judge only trials of this phase (repeatable: heatup, train, …)"
    )
    p.add_argument(
        "--since-ms",
        type=int,
        metavar="MS",
        help="judge the trials created since this time (Unix ms; default: since the judge started)",
    )
    p.set_defaults(func=_judge)


def _judge(args) -> int:
    require_extra("websockets", "gateway", "trialog judge")
    from trialog.spec import load_entry
    from trialog.tools.judge import judge

    if args.lag < 0 or not 0 < args.confidence <= 1:
        raise TrialogError("--lag must be ≥ 0 and --confidence in (0, 1]")
    rate = load_entry(args.rate, what="rating function")
    if not callable(rate):
        raise TrialogError(f"{args.rate} is not a function")

    async def go():
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        tally = await judge(
            args.gateway,
            rate,
            name=args.name,
            lag=args.lag,
            confidence=args.confidence,
            spec=args.trial_spec,
            experiment=args.experiment,
            phases=frozenset(args.phase),
            since_ms=args.since_ms,
            stop=stop,
        )
        print(tally.line(), flush=True)

    run_async(go())
    return 0
