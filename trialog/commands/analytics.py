"""``trialog analytics``: the latest results of the analytics jobs (:mod:`trialog.analytics`)."""

from __future__ import annotations

import orjson

from trialog.analytics import RESULT_TOPICS, read_results
from trialog.commands.parts import command, run_async
from trialog.settings import from_args


def add(sub) -> None:
    p = command(
        sub, "analytics", "Show the latest results of the analytics jobs (trialog serve analytics) from their topics."
    )
    p.add_argument("job", nargs="?", choices=list(RESULT_TOPICS), help="one job (default: every summary job)")
    p.add_argument("--json", action="store_true", help="one JSON object per line: {job, key, value}")
    p.set_defaults(func=_show)


def _show(args) -> int:
    from trialog.bus import connect

    jobs = [args.job] if args.job else [job for job in RESULT_TOPICS if job != "trials"]

    async def go():
        async with connect(from_args(args)) as bus:
            return {job: await read_results(bus, job) for job in jobs}

    for job, results in run_async(go()).items():
        if args.json:
            for key, value in sorted(results.items()):
                print(orjson.dumps({"job": job, "key": key, "value": value}).decode())
            continue
        running = "" if results else " — is `trialog serve analytics` running?"
        print(f"{job} ({RESULT_TOPICS[job]}): {len(results)} key(s)" + running)
        for key, value in sorted(results.items()):
            shown = {k: v for k, v in value.items() if k not in ("job", "key")}
            print(f"  {key}: {orjson.dumps(shown).decode()}")
    return 0
