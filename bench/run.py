"""Trialog's benchmark: each figure side by side with a floor measured in the same run on the same broker.

    python bench/run.py [--bootstrap-servers H:P] [--json PATH] [--quick] [--only PARTS] [--warm-up SECONDS]

The services (orchestrator, environment host, actor host) run as subprocesses
through ``python -m trialog.cli serve``, as in a deployment; the controller, the
floors and the replay run in this process. Every run uses a fresh topic prefix. Before
anything is measured, a minute of raw load warms the broker's JVM (``--warm-up``).
Each throughput run also reads each service's CPU time from /proc, and this
process's own (the controller), around the run: CPU per tick, process by process.
See ``docs/performance.md`` for a run's table and what limits each figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # runnable as `python bench/run.py` from anywhere

from bench import core, floor, topology
from bench.cpu import cpu_seconds
from trialog.bus import connect
from trialog.bus.memory import MemoryBus
from trialog.commands.parts import run_async
from trialog.controller import Controller
from trialog.protocol.topics import TRIALS
from trialog.settings import Settings
from trialog.spec import load_spec

TRIVIAL = ROOT / "bench" / "trivial.yaml"
OVERCOOKED = ROOT / "examples" / "overcooked" / "jax.yaml"  # CoGrid on JAX, stepped in batches (update_batch)
# Each target as printed, and the bound the table's met/NO check applies.
TARGETS = {
    "tick_p50": "≤ 1.4 × floor",
    "events_64": "≥ 0.6 × floor",
    "replay": "≥ 0.75 × floor",
    "cpu_live": "≤ 1.3 × the 16-trial row",
    "overcooked_64": "≥ 3 × the in-process loop (goal 5×)",
    "memory": "≤ 50 KB",
}
BOUNDS = {"tick_p50": 1.4, "events_64": 0.6, "replay": 0.75, "cpu_live": 1.3, "overcooked_64": 3.0, "memory_kb": 50}
THROUGHPUT_TRIALS = (1, 16, 64, 256)
# The live-trials row: this many trials of bench/trivial.yaml started at once, this many
# ticks each (enough that every trial is still live when the last one starts).
LIVE = {"full": (1000, 20), "quick": (200, 10)}
OVERCOOKED_TRIALS = (1, 16, 64)


@contextlib.asynccontextmanager
async def serving(
    settings: Settings, spec_file: Path, logdir: Path, *, environments: int = 1, played: Iterable[str] = ()
):
    """Orchestrator, environment (``environments`` instances of one group) and actor
    services as subprocesses, stopped with SIGTERM. ``played``: the actor
    implementations the run plays, the only ones the actor service hosts (each hosted
    implementation is a consumer group of its own that reads every record). Yields
    each service's processes by name (``orchestrator``, ``environment``, ``actors``)."""
    flags = [
        "--spec", str(spec_file), "--bootstrap-servers", settings.bootstrap_servers,
        "--topic-prefix", settings.topic_prefix, "--partitions", str(settings.partitions), "--health-port", "0",
    ]  # fmt: skip
    only = [flag for impl in played for flag in ("--implementation", impl)]
    procs, logs = [], []
    services: dict[str, list] = {}
    try:
        for i, name in enumerate(("orchestrator", *["environment"] * environments, "actors")):
            log = open(logdir / f"{settings.topic_prefix}{name}-{i}.log", "wb")  # noqa: SIM115, ASYNC230 - closed below, once
            logs.append(log)
            extra = only if name == "actors" else []
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "trialog.cli", "serve", name, *flags, *extra, cwd=ROOT, stdout=log, stderr=log
                )
            )
            services.setdefault(name, []).append(procs[-1])
        await _assigned([Path(log.name) for log in logs], procs)
        yield services
    finally:
        for p in procs:
            if p.returncode is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                await asyncio.wait_for(p.wait(), 20)
            except TimeoutError:
                p.kill()
        for log in logs:
            log.close()


async def _assigned(logs: list[Path], procs: list, timeout: float = 300) -> None:
    """Until every service has its partitions (an environment service importing JAX and preparing
    CoGrid on a loaded machine took more than the 30 s a trial waits for its environment)."""
    deadline = time.monotonic() + timeout
    waiting = dict(zip(logs, procs, strict=True))
    while waiting:
        for log, proc in list(waiting.items()):
            if b'"event":"partition assigned"' in log.read_bytes():
                del waiting[log]
            elif proc.returncode is not None:
                raise core.IncompleteRun(f"{log.name}: the service exited with code {proc.returncode}")
        if waiting and time.monotonic() > deadline:
            raise core.IncompleteRun(f"services without partitions after {timeout:.0f} s: {[p.name for p in waiting]}")
        await asyncio.sleep(0.2)


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


class CpuMeter:
    """CPU time over one measured run: each service's (its instances summed, read from
    /proc) and this process's own, which during a run is the controller's."""

    def __init__(self, services: dict[str, list], logdir: Path):
        self.services = services
        self.logdir = logdir
        self.before = self._read()

    def _read(self) -> dict[str, float]:
        out = {}
        for name, procs in self.services.items():
            try:
                out[name] = sum(cpu_seconds(p.pid) for p in procs)
            except FileNotFoundError:
                raise core.IncompleteRun(f"the {name} service is gone; its log is in {self.logdir}") from None
        out["controller"] = time.process_time()
        return out

    def per_tick(self, ticks: int) -> dict[str, float]:
        """µs of CPU per tick since the meter was made, per process, and their total."""
        after = self._read()
        row = {name: (after[name] - self.before[name]) / ticks * 1e6 for name in after}
        row["total"] = sum(row.values())
        return row


async def bench_trivial(settings: Settings, args, logdir: Path, out: dict) -> None:
    bus = connect(settings)
    spec = load_spec(TRIVIAL, bus.store)
    await bus.create_topics()
    async with serving(settings, TRIVIAL, logdir) as services, Controller(bus, follow=TRIALS) as ctl:
        # Warm-up: waits out the services' start and group joins, and warms their code paths.
        await core.run_trials(ctl, spec.name, 2, 20, timeout=120)

        ticks = 300 if args.quick else 2000
        run = await core.run_trials(ctl, spec.name, 1, ticks)
        core.check_complete(run, await core.read_records(bus, run.trial_ids))
        lat = core.tick_latencies_ms(bus, run.records)
        if len(lat) != ticks:
            raise core.IncompleteRun(f"{len(lat)} tick latencies for {ticks} ticks")
        obs_value = next(r.value for r in run.records if r.header("kind") == "observation")
        hop = await floor.two_hop(settings, 300 if args.quick else 2000, obs_value)
        _, shape_p50 = await topology.tick_shape(settings, "floor.shape.latency", run.records, settings.partitions)
        _, lean_p50 = await topology.tick_shape(
            settings, "floor.shape.lean", run.records, settings.partitions, lean=True
        )
        out["tick_latency"] = {
            "trialog": core.summary(lat),
            "floor": core.summary(hop),
            "shape_p50": shape_p50,
            "shape_lean_p50": lean_p50,
        }
        print(
            f"tick latency done: p50 {out['tick_latency']['trialog']['p50']:.2f} ms "
            f"vs floor {out['tick_latency']['floor']['p50']:.2f}, the tick's shape in raw aiokafka {shape_p50:.2f}, "
            f"writing without reading back {lean_p50:.2f}",
            flush=True,
        )

        out["throughput"] = {}
        live_n, live_ticks = LIVE["quick" if args.quick else "full"]
        sizes = [(n, max(10, (400 if args.quick else 4000) // n) if n > 1 else (200 if args.quick else 1000))
                 for n in THROUGHPUT_TRIALS]  # fmt: skip
        for n, per_trial in [*sizes, (live_n, live_ticks)]:
            meter = CpuMeter(services, logdir)
            run = await core.run_trials(ctl, spec.name, n, per_trial)
            cpu = meter.per_tick(n * per_trial)
            core.check_complete(run, await core.read_records(bus, run.trial_ids))
            raw = await floor.produce_consume(settings, f"floor.tp{n}", run.records, settings.partitions)
            shape, _ = await topology.tick_shape(settings, f"floor.shape{n}", run.records, settings.partitions)
            lean, _ = await topology.tick_shape(
                settings, f"floor.shape.lean{n}", run.records, settings.partitions, lean=True
            )
            out["throughput"][n] = {
                "ticks": n * per_trial,
                "events": run.events,
                "bytes": run.event_bytes,
                "seconds": run.seconds,
                "ticks_per_s": n * per_trial / run.seconds,
                "events_per_s": run.events / run.seconds,
                "floor_seconds": raw,
                "floor_events_per_s": run.events / raw,
                "shape_seconds": shape,
                "shape_events_per_s": run.events / shape,
                "shape_lean_seconds": lean,
                "shape_lean_events_per_s": run.events / lean,
                "cpu_us_per_tick": cpu,
            }
            if n == live_n:
                # The live-trials row is about trials being live together: say how many were.
                out["throughput"][n]["peak_live"] = core.peak_live(run.records)
            print(
                f"throughput {n}: {run.events / run.seconds:.0f} events/s vs floor {run.events / raw:.0f}, "
                f"the tick's shape in raw aiokafka {run.events / shape:.0f}, not reading back {run.events / lean:.0f}, "
                f"{cpu['total']:.0f} µs CPU/tick, {run.seconds:.1f} s",
                flush=True,
            )

    # Replay: every trial of this run is finished; both sides read the whole events topic.
    replay_s, events, samples = await core.timed_replay(bus)
    raw_s, raw_events = await floor.consume_decode(settings, bus.store, settings.partitions)
    if raw_events < events:
        raise core.IncompleteRun(f"raw replay read {raw_events} records, Trialog {events}")
    out["replay"] = {
        "api": "trialog.datalog.replay.read_trials (samples of every trial)",
        "events": events,
        "samples": samples,
        "seconds": replay_s,
        "events_per_s": events / replay_s,
        "samples_per_s": samples / replay_s,
        "floor_events_per_s": raw_events / raw_s,
    }


async def bench_overcooked(settings: Settings, args, logdir: Path, out: dict) -> None:
    try:
        import jax  # noqa: F401
        from cogrid.envs.registry import make  # noqa: F401

        import trialog.adapters.cogrid_jax  # noqa: F401
        import trialog.agents.random_agent  # noqa: F401
    except ImportError as exc:
        out["overcooked"] = {"error": f"n/a (adapter not available: {exc})"}
        return
    if not OVERCOOKED.exists():
        out["overcooked"] = {"error": "n/a (adapter not available: no examples/overcooked/jax.yaml)"}
        return
    ticks = 50 if args.quick else 200
    floor_steps = _overcooked_in_process(400 if args.quick else 2000)
    out["overcooked"] = {"floor_steps_per_s": floor_steps}
    bus = connect(settings)
    spec = load_spec(OVERCOOKED, bus.store)
    await bus.create_topics()
    # Random cooks on both sides, as in the in-process loop: the figure is the hosting, not the planner.
    random_cooks = {a.name: "random" for a in spec.trial.actors}
    # Two environment instances, each stepping the trials it hosts in batches: one jitted,
    # vmapped CoGrid step on JAX per poll's completed trials (the floor is one process
    # stepping one numpy env, CoGrid's default backend, as the PettingZoo adapter does).
    async with (
        serving(settings, OVERCOOKED, logdir, environments=2, played=set(random_cooks.values())) as services,
        Controller(bus, follow=TRIALS) as ctl,
    ):
        # Warm-up: each instance compiles its batch sizes once (seconds each, in the background
        # while it steps with the sizes it has); the timed runs start once both say they are done.
        await core.run_trials(ctl, spec.name, 1, 5, timeout=180, implementations=random_cooks)
        await core.run_trials(ctl, spec.name, 64, 20, timeout=300, implementations=random_cooks)
        await _compiled(logdir, settings.topic_prefix, instances=2)
        for n in OVERCOOKED_TRIALS:
            # 64 trials: fewer steps each, the same order of steps in all as 16 trials of `ticks`.
            per_trial = ticks if n <= 16 else (15 if args.quick else 60)
            meter = CpuMeter(services, logdir)
            run = await core.run_trials(ctl, spec.name, n, per_trial, implementations=random_cooks)
            cpu = meter.per_tick(n * per_trial)
            core.check_complete(run, await core.read_records(bus, run.trial_ids))
            steps = n * per_trial
            out["overcooked"][n] = {
                "steps": steps,
                "seconds": run.seconds,
                "steps_per_s": steps / run.seconds,
                "cpu_us_per_tick": cpu,
            }
            print(
                f"overcooked {n}: {steps / run.seconds:.0f} steps/s vs in-process {floor_steps:.0f}, "
                f"{cpu['total']:.0f} µs CPU/step, {run.seconds:.1f} s",
                flush=True,
            )


async def _compiled(logdir: Path, prefix: str, instances: int, timeout: float = 600) -> None:
    """Wait until ``instances`` environment services logged that their batch sizes are compiled."""
    from trialog.adapters.cogrid_jax import WARM_MESSAGE

    deadline = time.monotonic() + timeout
    while True:
        logs = logdir.glob(f"{prefix}environment-*.log")
        done = sum(WARM_MESSAGE in p.read_text(errors="replace") for p in logs)
        if done >= instances:
            return
        if time.monotonic() > deadline:
            print(f"warning: {done} of {instances} environment services compiled in {timeout:.0f} s", flush=True)
            return
        await asyncio.sleep(1)


def _overcooked_in_process(steps: int) -> float:
    """Steps/s of CoGrid's Overcooked stepped directly (numpy backend), random actions, one loop."""
    from cogrid.envs.registry import make

    env = make(environment_id="Overcooked-CrampedRoom-V0")
    rng = random.Random(0)
    env.reset(seed=0)
    t0 = time.perf_counter()
    for _ in range(steps):
        _obs, _rew, terminated, truncated, _info = env.step({a: env.action_space(a).sample() for a in env.agents})
        if all(terminated.values()) or all(truncated.values()):
            env.reset(seed=rng.randrange(1 << 30))
    return steps / (time.perf_counter() - t0)


def bench_memory(out: dict, trials: int) -> None:
    bus = MemoryBus(Settings.load({}, environ={}))
    spec = load_spec(TRIVIAL, bus.store)
    per_trial, _ = core.orchestrator_bytes_per_trial(bus, spec, trials)
    out["memory"] = {"trials": trials, "bytes_per_trial": per_trial}


SHAPE = "the tick's shape, raw aiokafka (same run)"


def table(out: dict) -> str:
    rows = [("figure", "Trialog", "floor (same run)", "ratio", "target", "met", SHAPE)]
    t = out.get("tick_latency")
    if t:
        r = ratio(t["trialog"]["p50"], t["floor"]["p50"])
        rows.append(
            (
                "tick latency p50 / p99 (ms)",
                f"{t['trialog']['p50']:.2f} / {t['trialog']['p99']:.2f}",
                f"{t['floor']['p50']:.2f} / {t['floor']['p99']:.2f} (two-hop)",
                f"{r:.2f}×",
                TARGETS["tick_p50"],
                _yes(r <= BOUNDS["tick_p50"]),
                _shape(t.get("shape_p50"), t["floor"]["p50"], t["trialog"]["p50"], "ms")
                + _lean(t.get("shape_lean_p50"), t["floor"]["p50"], t["trialog"]["p50"]),
            )
        )
    throughput = {int(n): tp for n, tp in (out.get("throughput") or {}).items()}
    for n, tp in throughput.items():
        r = ratio(tp["events_per_s"], tp["floor_events_per_s"])
        cpu = tp.get("cpu_us_per_tick")
        rows.append(
            (
                f"throughput, {n} trials: ticks/s, events/s" + (", µs CPU/tick" if cpu else ""),
                f"{tp['ticks_per_s']:.0f}, {tp['events_per_s']:.0f}" + (f", {cpu['total']:.0f}" if cpu else ""),
                f"{tp['floor_events_per_s']:.0f} events/s (produce+consume)",
                f"{r:.2f}×",
                TARGETS["events_64"] if n == 64 else "",
                _yes(r >= BOUNDS["events_64"]) if n == 64 else "",
                _shape(tp.get("shape_events_per_s"), tp["floor_events_per_s"], tp["events_per_s"], "events/s")
                + _lean(tp.get("shape_lean_events_per_s"), tp["floor_events_per_s"], tp["events_per_s"], "events/s"),
            )
        )
    live = [n for n in throughput if n not in THROUGHPUT_TRIALS]
    if live and 16 in throughput and "cpu_us_per_tick" in throughput[16]:
        n = live[0]
        cpu, cpu_16 = throughput[n]["cpu_us_per_tick"]["total"], throughput[16]["cpu_us_per_tick"]["total"]
        r = ratio(cpu, cpu_16)
        peak = throughput[n].get("peak_live")
        rows.append(
            (
                f"µs CPU per tick, {n} trials" + (f" ({peak} live at once)" if peak else ""),
                f"{cpu:.0f}",
                f"{cpu_16:.0f} (16-trial row)",
                f"{r:.2f}×",
                TARGETS["cpu_live"],
                _yes(r <= BOUNDS["cpu_live"]),
            )
        )
    rp = out.get("replay")
    if rp:
        r = ratio(rp["events_per_s"], rp["floor_events_per_s"])
        rows.append(
            (
                "replay: samples/s, events/s",
                f"{rp['samples_per_s']:.0f}, {rp['events_per_s']:.0f}",
                f"{rp['floor_events_per_s']:.0f} events/s (consume+fastavro)",
                f"{r:.2f}×",
                TARGETS["replay"],
                _yes(r >= BOUNDS["replay"]),
            )
        )
    oc = out.get("overcooked")
    if oc and "error" in oc:
        sizes = " / ".join(map(str, OVERCOOKED_TRIALS))
        rows.append((f"Overcooked steps/s, {sizes} trials", oc["error"], "", "", TARGETS["overcooked_64"], ""))
    elif oc:
        for n in OVERCOOKED_TRIALS:
            row = oc.get(n) or oc.get(str(n))  # str keys: a table of figures read back from JSON
            if row:
                r = ratio(row["steps_per_s"], oc["floor_steps_per_s"])
                rows.append(
                    (
                        f"Overcooked steps/s, {n} trial(s)",
                        f"{row['steps_per_s']:.0f}",
                        f"{oc['floor_steps_per_s']:.0f} (in-process loop)",
                        f"{r:.2f}×",
                        TARGETS["overcooked_64"] if n == 64 else "",
                        _yes(r >= BOUNDS["overcooked_64"]) if n == 64 else "",
                    )
                )
    m = out.get("memory")
    if m:
        kb = m["bytes_per_trial"] / 1024
        rows.append(
            (
                "orchestrator memory per live trial",
                f"{kb:.1f} KB",
                "—",
                "",
                TARGETS["memory"],
                _yes(kb <= BOUNDS["memory_kb"]),
            )
        )
    rows = [r + ("",) * (len(rows[0]) - len(r)) for r in rows]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _shape(shape: float | None, floor_figure: float, trialog: float, unit: str) -> str:
    """The design's tick shape in raw aiokafka (bench/topology.py) beside the floor, and Trialog
    beside it: ratios the same way round as the row's (Trialog's latency over it, its rate over it)."""
    if not shape:
        return ""
    digits = 2 if unit == "ms" else 0
    return f"{shape:.{digits}f} {unit}: {shape / floor_figure:.2f}× floor; Trialog {trialog / shape:.2f}× it"


def _lean(lean: float | None, floor_figure: float, trialog: float, unit: str = "ms") -> str:
    """The same shape writing without fetching back what it wrote, as Trialog's loop does when it
    can (``bench/topology.py --lean``): the floor of a tick, or the ceiling of a rate, for
    Trialog's own work."""
    return f"; not reading back {_shape(lean, floor_figure, trialog, unit)}" if lean else ""


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


async def main_async(args) -> dict:
    base = Settings.load({"bootstrap_servers": args.bootstrap_servers, "partitions": 1}, environ={})
    prefix = f"bench-{uuid.uuid4().hex[:8]}."
    out: dict = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "processor": platform.processor(),
        },
        "bootstrap_servers": base.bootstrap_servers,
        "topic_prefix": prefix,
        "quick": args.quick,
    }
    logdir = Path(tempfile.mkdtemp(prefix="trialog-bench-"))
    print(f"topic prefix {prefix}; service logs in {logdir}", flush=True)
    only = set(args.only.split(",")) if args.only else {"memory", "trivial", "overcooked"}
    if "memory" in only:
        bench_memory(out, 2000 if args.quick else 10_000)
    if args.warm_up and only & {"trivial", "overcooked"}:
        t0 = time.perf_counter()
        warm = Settings.load({**_flags(base), "topic_prefix": prefix + "warm."}, environ={})
        rounds = await floor.warm_broker(warm, args.warm_up)
        out["broker_warm_up_s"] = time.perf_counter() - t0
        print(f"broker warmed up: {rounds} rounds of raw produce+consume and round trips, "
              f"{out['broker_warm_up_s']:.0f} s", flush=True)  # fmt: skip
    if "trivial" in only:
        await bench_trivial(Settings.load({**_flags(base), "topic_prefix": prefix}, environ={}), args, logdir, out)
    if "overcooked" in only:
        # 8 partitions: 16 or 64 trials spread evenly enough over two environment instances.
        await bench_overcooked(
            Settings.load({**_flags(base), "partitions": 8, "topic_prefix": prefix + "oc."}, environ={}),
            args,
            logdir,
            out,
        )
    return out


def _flags(settings: Settings) -> dict:
    return {"bootstrap_servers": settings.bootstrap_servers, "partitions": settings.partitions}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", default=os.environ.get("TRIALOG_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    p.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    p.add_argument("--quick", action="store_true", help="fewer ticks and trials (a smoke run, not figures to quote)")
    p.add_argument(
        "--only",
        metavar="PARTS",
        help="comma-separated subset of: memory, trivial (latency, throughput, replay), overcooked",
    )
    p.add_argument(
        "--warm-up",
        type=float,
        metavar="SECONDS",
        help="raw load on the broker before anything is measured, so that a fresh broker's JVM has compiled "
        "its hot paths (default 60; 5 with --quick; 0: none)",
    )
    args = p.parse_args(argv)
    if args.warm_up is None:
        args.warm_up = 5.0 if args.quick else 60.0
    # The same event loop as the services (trialog.commands.parts.run_async), so floors and figures compare alike.
    out = run_async(main_async(args))
    print()
    print(table(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
