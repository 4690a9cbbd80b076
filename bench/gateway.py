"""The web gateway's benchmark: a person's round trip through it, and how many seats one
gateway process holds in real time. Services and the gateway run as separate processes
on the broker at TRIALOG_BOOTSTRAP_SERVERS; people are simulated WebSocket clients.

1. **Round trip**, measured on the client side of the socket as a page does: action
   sent → next observation received, one seat of rock-paper-scissors beside the
   counter agent, no tick interval. Beside it, the two-hop Kafka floor of the same run
   (raw aiokafka ping-pong, ``bench/floor.py``): the least any tick can cost.
2. **Seats at a 150 ms tick**: N real-time trials at once, one seat each, every client
   answering as soon as its observation arrives. Per tick, from the log's timestamps:
   observation written by the environment → the person's action written by the
   gateway. One gateway process holds N seats when that p99 stays under the tick
   interval and no seat misses a deadline.
3. **Pages back at once**: N seats play T ticks, every page leaves, and all come
   back at once, as a restarted gateway's pages do; each page's seconds from its connect
   to its welcome (its trial's history read and folded). Beside them, the raw read of
   the whole log (consume+fastavro, ``bench/floor.py``): what one read of it costs.

    python bench/gateway.py [--short] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import people  # noqa: E402
from bench.core import percentile, read_records  # noqa: E402
from bench.cpu import cpu_seconds  # noqa: E402
from bench.floor import consume_decode, two_hop  # noqa: E402
from trialog.bus import connect  # noqa: E402
from trialog.commands.parts import run_async  # noqa: E402
from trialog.controller import Controller  # noqa: E402
from trialog.protocol.topics import TRIALS  # noqa: E402
from trialog.settings import Settings  # noqa: E402
from trialog.spec import load_spec  # noqa: E402
from trialog.tools.campaign import create_topics, local_services  # noqa: E402

SPEC = ROOT / "bench" / "gateway.yaml"
TICK_MS = 150
# Every simulated person connects from this one address: the gateway's per-address limits
# (sized for people behind one NAT, docs/humans.md#limits) are raised to what the load needs.
# So is a seat's message rate (20 a second, a tick every 50 ms): the round trip's trial has
# no tick interval and its person answers at once, a hundred actions a second; at the
# default the gateway refused some and each cost the trial its 10 s response timeout.
ONE_ADDRESS = [
    "--connections-per-address",
    "100000",
    "--connections-per-s-address",
    "100000",
    "--messages-per-s-address",
    "100000",
    "--messages-per-s-seat",
    "100000",
]


def seat_socket(url: str, holder: str) -> str:
    base, _, query = url.partition("/play?")
    return f"{base.replace('http://', 'ws://', 1)}/ws/seat?{query}&holder={holder}"


async def person(
    url: str,
    holder: str,
    round_trips: list[float] | None = None,
    *,
    leave_after: int | None = None,
    welcomed: list[float] | None = None,
) -> int:
    """Play ROCK at every observation until the end, or until ``leave_after`` actions were sent
    (then the page leaves); returns the actions sent. ``welcomed`` gets the seconds from the
    connect to the welcome. The socket is :mod:`bench.people`'s: the people share the machine
    with what they measure."""
    sent, last, t0 = 0, None, time.perf_counter()

    def on_message(ws: people.Socket, raw: bytes) -> bool:
        nonlocal sent, last
        msg = orjson.loads(raw)
        if msg["type"] == "welcome" and welcomed is not None:
            welcomed.append(time.perf_counter() - t0)
        if msg["type"] == "observation":
            if last is not None and round_trips is not None:
                round_trips.append((time.perf_counter() - last) * 1000)
                last = None
            if leave_after is not None and sent >= leave_after:
                return False
            if not msg["final"]:
                last = time.perf_counter()
                ws.send(orjson.dumps({"type": "action", "tick": msg["tick"], "action": "ROCK"}))
                sent += 1
        return msg["type"] not in ("end", "refused")

    await people.talk(seat_socket(url, holder), on_message)
    return sent


def spec_file(folder: Path, tick_interval_ms: int | None) -> Path:
    raw = yaml.safe_load(SPEC.read_text())
    raw["actor_classes"]["player"]["observation"] = str(ROOT / "examples" / "rps" / "observation.avsc")
    if tick_interval_ms:
        raw["trial"]["tick_interval_ms"] = tick_interval_ms
    path = folder / f"gw-bench-{tick_interval_ms or 0}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


async def round_trip(settings: Settings, ticks: int) -> dict:
    async with Controller(connect(settings), name="bench", follow=TRIALS) as ctl:
        tid = await ctl.start_trial("gw-bench", max_ticks=ticks)
        (url,) = ctl.join_links(tid, ["bob"]).values()
        trips: list[float] = []
        await person(url, "bench-1", trips)
        await ctl.wait_ended(tid, timeout=120)
        missed = sum(r.header("kind") == "actor.timeout" for r in await read_records(ctl.bus, [tid]))
    if missed:  # every action was sent: one the log lacks makes a round trip of the response timeout
        raise SystemExit(f"round trip: {missed} of the person's actions never reached the log")
    warm = trips[5:]  # the first ticks pay connection set-up
    floor = await two_hop(settings, len(warm), b"x" * 64)
    return {
        "ticks": len(warm),
        "p50": percentile(warm, 50),
        "p99": percentile(warm, 99),
        "floor_p50": percentile(floor, 50),
        "floor_p99": percentile(floor, 99),
    }


async def reconnect(settings: Settings, spec: Path, gateway_pid: int, seats: int, ticks: int) -> dict:
    """Part 3 (module doc): each page's seconds to its welcome, back at once after ``ticks``."""
    async with Controller(connect(settings), name="bench", follow=TRIALS) as ctl:
        tids = [await ctl.start_trial("gw-bench", max_ticks=ticks + 2) for _ in range(seats)]
        urls = [next(iter(ctl.join_links(t, ["bob"]).values())) for t in tids]
        await asyncio.gather(*(person(u, f"bench-{i}", leave_after=ticks) for i, u in enumerate(urls)))
        welcomed: list[float] = []
        cpu0 = cpu_seconds(gateway_pid)
        await asyncio.gather(*(person(u, f"bench-{i}", welcomed=welcomed) for i, u in enumerate(urls)))
        cpu = cpu_seconds(gateway_pid) - cpu0
        ends = [await ctl.wait_ended(t, timeout=120) for t in tids]
        load_spec(spec, ctl.bus.store)  # the payloads' schemas, for the floor's decoding
        floor_s, records = await consume_decode(settings, ctl.bus.store, settings.partitions)
    if len(welcomed) < seats or any(e.reason != "max_ticks" for e in ends):
        raise SystemExit(f"reconnect: {len(welcomed)} of {seats} pages welcomed back, ends {[e.reason for e in ends]}")
    return {
        "seats": seats,
        "ticks": ticks,
        "welcome_p50_s": percentile(welcomed, 50),
        "welcome_max_s": max(welcomed),
        "gateway_cpu_s": cpu,
        "log_records": records,
        "floor_s": floor_s,
    }


async def capacity(settings: Settings, seats: int, ticks: int) -> dict:
    async with Controller(connect(settings), name="bench", follow=TRIALS) as ctl:
        tids = [await ctl.start_trial("gw-bench", max_ticks=ticks) for _ in range(seats)]
        urls = [next(iter(ctl.join_links(t, ["bob"]).values())) for t in tids]
        t0 = time.monotonic()
        await asyncio.gather(*(person(u, f"bench-{i}") for i, u in enumerate(urls)))
        ends = [await ctl.wait_ended(t, timeout=120) for t in tids]
        seconds = time.monotonic() - t0
        records = await read_records(ctl.bus, tids)
    written: dict[tuple[str, str, int], int] = {}
    missed = 0
    for r in records:
        kind, receiver, sender = r.header("kind"), r.header("receiver"), r.header("sender")
        tick = int(r.header("tick") or -1)
        if kind == "observation" and receiver == "bob":
            written[(r.trial_id, "obs", tick)] = r.timestamp_ms
        elif kind == "action" and sender == "bob":
            written[(r.trial_id, "act", tick)] = r.timestamp_ms
        elif kind == "actor.timeout" and receiver == "bob":
            missed += 1
    delays = [
        written[(t, "act", k)] - at
        for (t, what, k), at in written.items()
        if what == "obs" and (t, "act", k) in written
    ]
    p99 = percentile(delays, 99) if delays else float("inf")
    return {
        "seats": seats,
        "ticks": ticks,
        "answered": len(delays),
        "missed_deadlines": missed,
        "p50": percentile(delays, 50) if delays else None,
        "p99": p99,
        "held": p99 < TICK_MS and missed == 0 and all(e.reason == "max_ticks" for e in ends),
        "seconds": round(seconds, 1),
    }


async def main_async(args) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="trialog-gw-bench-"))
    base = {"bootstrap_servers": args.bootstrap_servers, "partitions": 4}
    out: dict = {"short": args.short}
    port = args.port

    def settings(prefix: str) -> Settings:
        return Settings.load({**base, "topic_prefix": prefix, "gateway_url": f"http://127.0.0.1:{port}"}, environ={})

    unpaced = spec_file(folder, None)  # the round trip's and the reconnect's: no tick interval
    plain = settings(f"gwbench-{uuid.uuid4().hex[:8]}.")
    await create_topics(plain)
    with local_services(plain, str(unpaced), gateway_port=port, gateway_args=ONE_ADDRESS, log_dir=str(folder)):
        out["round_trip"] = await round_trip(plain, 60 if args.short else 300)
    paced = settings(f"gwbench-{uuid.uuid4().hex[:8]}.")
    await create_topics(paced)
    out["capacity"] = []
    with local_services(
        paced, str(spec_file(folder, TICK_MS)), gateway_port=port, gateway_args=ONE_ADDRESS, log_dir=str(folder)
    ):
        for n in [8] if args.short else [4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512]:
            row = await capacity(paced, n, 20 if args.short else 60)
            out["capacity"].append(row)
            print(
                f"  {n} seats: p50 {row['p50']} ms, p99 {row['p99']} ms, "
                f"missed {row['missed_deadlines']}: {'held' if row['held'] else 'NOT held'}",
                flush=True,
            )
            if not row["held"]:
                break
    again = settings(f"gwbench-{uuid.uuid4().hex[:8]}.")
    await create_topics(again)
    with local_services(again, str(unpaced), gateway_port=port, gateway_args=ONE_ADDRESS, log_dir=str(folder)) as procs:
        out["reconnect"] = await reconnect(
            again, unpaced, procs["gateway"].pid, *((16, 100) if args.short else (64, 600))
        )
    out["logs"] = str(folder)
    return out


def table(out: dict) -> str:
    rt = out["round_trip"]
    held = [r["seats"] for r in out["capacity"] if r["held"]]
    lines = [
        f"{'figure':58} {'gateway':>16} {'floor (same run)':>18}",
        f"{'person round trip p50 / p99 (ms), action -> next observation':58} "
        f"{rt['p50']:>7.1f} / {rt['p99']:<7.1f} {rt['floor_p50']:>7.1f} / {rt['floor_p99']:<7.1f} (two-hop)",
    ]
    for r in out["capacity"]:
        label = f"seats at a {TICK_MS} ms tick: {r['seats']}, observation -> action p50 / p99 (ms)"
        lines.append(
            f"{label:58} "
            f"{r['p50']:>7} / {r['p99']:<7} missed {r['missed_deadlines']}, {'held' if r['held'] else 'NOT held'}"
        )
    lines.append(
        f"seats one gateway process holds at a {TICK_MS} ms tick (p99 < {TICK_MS} ms, no deadline missed): "
        f"{max(held) if held else 'fewer than the fewest tried'}"
    )
    rc = out["reconnect"]
    label = f"pages back at once: {rc['seats']} at tick {rc['ticks']}, to welcome p50 / max (s)"
    lines.append(
        f"{label:58} {rc['welcome_p50_s']:>7.2f} / {rc['welcome_max_s']:<7.2f} {rc['floor_s']:>7.2f} s"
        f" (the log, {rc['log_records']:,} records, read once raw); gateway CPU {rc['gateway_cpu_s']:.1f} s"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", default=os.environ.get("TRIALOG_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    p.add_argument("--port", type=int, default=0, help="the gateway's port (default: a free one)")
    p.add_argument(
        "--short", action="store_true", help="one seat count and few ticks (CI's smoke run; figures not to quote)"
    )
    p.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    args = p.parse_args(argv)
    if not args.port:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            args.port = probe.getsockname()[1]
    out = run_async(main_async(args))
    print()
    print(table(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    return 0 if out["round_trip"]["ticks"] and out["capacity"] and out["reconnect"] else 1


if __name__ == "__main__":
    sys.exit(main())
