"""Chaos: every service SIGKILLed while it owns the trials, and the broker too; nothing changes.

Starts a Kafka broker of its own (``--port``, ``--data-dir``) and the orchestrator,
environment, actor and logger services of ``tools/chaos.yaml`` as processes, one
instance each — so each one certainly owns every trial's partition. It runs the
campaign's trials once undisturbed (the reference), then again with the same seeds
while it SIGKILLs, one after the other, the environment and actor services, the
broker (restarted on the same data), the orchestrator and the logger — each service
restarted at once, with no clean hand-off: the restarted process takes over after the
dead one's consumer session expires and rebuilds from the log. Between two
kills it waits until every trial has moved on, so each kill lands mid-trial.

Then it judges: every trial's replay must equal its reference, sample for sample
(observations, actions, rewards with every source), and the logger's Parquet archive
must hold each (trial, tick, actor) of it exactly once. It prints

    trials, kills, identical, lost, duplicated

and exits 0 only if every trial is identical and nothing is lost or duplicated.

    # the long run: 6 trials of 2000 ticks, every kill twice
    python tools/chaos.py
    # what CI runs (tests/faults/test_chaos.py)
    python tools/chaos.py --trials 2 --rounds 1 --ticks 800 --json chaos.json
    # the broker away longer than a request's timeout
    python tools/chaos.py --trials 2 --ticks 3000 --broker-down 45

The broker is started with ``trialog broker start`` (port 9492, controller 9493 and a
data dir under a temporary folder by default) and stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq  # noqa: E402

from tools.fuzz import first_difference, signature  # noqa: E402  (one definition of "the same trial")
from trialog.bus.kafka import KafkaBus  # noqa: E402
from trialog.controller import Controller  # noqa: E402
from trialog.datalog.archive import Archive  # noqa: E402
from trialog.datalog.replay import read_trial  # noqa: E402
from trialog.settings import Settings  # noqa: E402
from trialog.tools.campaign import start_service, wait_ready  # noqa: E402

SPEC = ROOT / "tools" / "chaos.yaml"
SERVICES = ("orchestrator", "environment", "actors", "logger")
# The order of the kills: those that stall the tick first, then the ones trials tick through
# while they restart (so a trial is still under way for the last one).
KILLS = ("environment", "actors", "broker", "orchestrator", "logger")
# Trials tick on while these restart: their takeovers (a dead member's session expiring, 10 s)
# are awaited once the round's kills are done — awaited one by one, a fast machine's trials
# ran their 800 ticks out during the orchestrator's, before the logger's kill.
TICKED_THROUGH = ("orchestrator", "logger")


@dataclass
class Report:
    trials: int = 0
    kills: list[str] = field(default_factory=list)
    identical: int = 0
    lost: int = 0  # (trial, tick, actor) of a replay missing from the archive, or trials missing altogether
    duplicated: int = 0  # (trial, tick, actor) rows beyond the first in the archive
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.trials > 0 and self.identical == self.trials and self.lost == 0 and self.duplicated == 0

    def line(self) -> str:
        return (
            f"trials {self.trials}, kills {len(self.kills)}, identical {self.identical}, "
            f"lost {self.lost}, duplicated {self.duplicated}"
        )


class Broker:
    """The campaign's own broker, started and SIGKILLed through ``trialog broker``."""

    def __init__(self, data_dir: Path, port: int, controller_port: int):
        self.data_dir, self.port, self.controller_port = data_dir, port, controller_port

    def _cli(self, *args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "trialog.cli", "broker", *args, "--data-dir", str(self.data_dir)]
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=180, env={**os.environ, "TRIALOG_LOG_FORMAT": "json"}
        )

    def start(self) -> str:
        done = self._cli(
            "start", "--port", str(self.port), "--controller-port", str(self.controller_port), "--heap", "512m"
        )
        if done.returncode != 0:
            raise SystemExit(f"the chaos broker did not start:\n{done.stderr[-2000:]}")
        return done.stdout.strip().splitlines()[-1]

    def kill(self) -> None:
        os.kill(int((self.data_dir / "broker.pid").read_text().strip()), signal.SIGKILL)
        time.sleep(1.0)

    def stop(self) -> None:
        self._cli("stop")


class Services:
    """One process per service; a killed one is restarted with the same command."""

    def __init__(self, settings: Settings, logs: Path, archive: Path):
        self.settings, self.logs, self.archive = settings, logs, archive
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}

    def start(self, name: str) -> None:
        args = [name, "--archive-dir", str(self.archive), "--grace", "2"] if name == "logger" else [name]
        self.procs[name], self.ports[name] = start_service(self.settings, str(SPEC), args, self.logs / f"{name}.log")

    def ready(self, names=None) -> None:
        names = list(names or self.procs)
        wait_ready({n: self.procs[n] for n in names}, {n: self.ports[n] for n in names}, self.logs, timeout=180)

    def kill(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait()
        self.start(name)  # at once: the new process takes over when the dead one's session expires

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


async def wait_moving(ctl: Controller, ids: list[str], ticks: int, services: Services, timeout: float = 240) -> bool:
    """Until every running trial has moved ``ticks`` on; False when none is running any more."""
    start = {t: ctl.last_tick(t) for t in ids}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stopped = [f"{n} (exit {p.returncode})" for n, p in services.procs.items() if p.poll() is not None]
        if stopped:
            raise SystemExit(f"a service stopped: {', '.join(stopped)} (logs in {services.logs})")
        running = [t for t in ids if not ctl._watch(t).ended.done()]
        if not running:
            return False
        if all(ctl.last_tick(t) >= start[t] + ticks for t in running):
            return True
        await asyncio.sleep(0.2)
    for p in services.procs.values():  # each logs what its tasks wait on: the tails printed below show it
        p.send_signal(signal.SIGUSR1)
    await asyncio.sleep(2.0)
    raise SystemExit(f"trials did not move {ticks} ticks on within {timeout:g} s after a kill (see the service logs)")


async def campaign(
    settings: Settings,
    broker: Broker,
    services: Services,
    *,
    trials: int,
    ticks: int,
    rounds: int,
    seed: int,
    broker_down: float = 0.0,
) -> Report:
    report = Report(trials=trials)
    seeds = [seed * 1000 + i for i in range(trials)]
    bus = KafkaBus(settings)
    await bus.create_topics()
    for name in SERVICES:
        services.start(name)
    services.ready()
    async with bus, Controller(bus, name="chaos") as ctl:
        reference = {s: await ctl.start_trial("chaos", seed=s, max_ticks=ticks) for s in seeds}
        for tid in reference.values():
            await ctl.wait_ended(tid, timeout=600)
        disturbed = {s: await ctl.start_trial("chaos", seed=s, max_ticks=ticks) for s in seeds}
        ids = list(disturbed.values())
        for _ in range(rounds):
            for target in KILLS:
                if not await wait_moving(ctl, ids, 5, services):
                    raise SystemExit(f"every trial ended before the {target} kill: run longer trials (--ticks)")
                print(f"SIGKILL {target} at ticks {sorted(ctl.last_tick(t) for t in ids)}", file=sys.stderr)
                if target == "broker":
                    broker.kill()
                    await asyncio.sleep(broker_down)  # the services keep trying meanwhile
                    broker.start()
                else:
                    services.ready([target])  # the one instance: it owns every partition of the trials
                    services.kill(target)
                    if target not in TICKED_THROUGH:
                        services.ready([target])  # taken over (after the dead one's session expired) and caught up
                report.kills.append(target)
            services.ready(list(TICKED_THROUGH))
        ends = [await ctl.wait_ended(t, timeout=900) for t in ids]
        crashed = [f"{n} exited with {p.returncode}" for n, p in services.procs.items() if p.poll() is not None]
        if crashed:
            report.differences.append(f"services stopped: {', '.join(crashed)}")
        for s in seeds:
            before, after = (
                signature(await read_trial(bus, reference[s])),
                signature(await read_trial(bus, disturbed[s])),
            )
            if before == after:
                report.identical += 1
            else:
                report.differences.append(f"seed {s}: {first_difference(before, after)}")
        report.differences += [f"{t} ended with {e.reason}" for t, e in zip(ids, ends) if e.reason != "max_ticks"]
        await judge_archive(bus, services.archive, ids, report)
    return report


async def judge_archive(bus: KafkaBus, root: Path, ids: list[str], report: Report, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(Archive(root).entry(t) for t in ids):
        await asyncio.sleep(0.5)
    archive = Archive(root)
    for tid in ids:
        wanted = {(s.tick, s.actor) for s in (await read_trial(bus, tid)).samples()}
        entry = archive.entry(tid)
        if entry is None:
            report.lost += len(wanted)
            report.differences.append(f"{tid} is not in the archive")
            continue
        rows = pq.read_table(root / entry["file"], columns=["tick", "actor"]).to_pylist()
        counts = Counter((r["tick"], r["actor"]) for r in rows)
        report.duplicated += sum(n - 1 for n in counts.values())
        report.lost += len(wanted - set(counts))


def print_log_tails(logs: Path, lines: int = 12) -> None:
    """The last lines of each service's log, on stderr."""
    for path in sorted(logs.glob("*.log")):
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        print(f"--- last {len(tail)} lines of {path.name}", *tail, sep="\n", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=6, help="trials in the campaign (default 6)")
    p.add_argument("--ticks", type=int, default=2000, help="max_ticks of each trial (default 2000)")
    p.add_argument("--rounds", type=int, default=2, help="times each service and the broker are killed (default 2)")
    p.add_argument("--seed", type=int, default=1, help="the campaign's seeds are seed*1000+i")
    p.add_argument(
        "--broker-down",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="how long the killed broker stays down before its restart (default 0; over 40, requests time out)",
    )
    p.add_argument(
        "--port", type=int, default=9492, help="port of the campaign's own broker (default 9492; controller: port+1)"
    )
    p.add_argument("--data-dir", help="the broker's data dir (default: a fresh temporary folder)")
    p.add_argument("--log-dir", help="where the services' logs and the archive go (default: a temporary folder)")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = p.parse_args(argv)
    if args.broker_down < 0:
        p.error("--broker-down must be 0 or more seconds")
    work = Path(args.log_dir or tempfile.mkdtemp(prefix="trialog-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    broker = Broker(Path(args.data_dir or work / "broker"), args.port, args.port + 1)
    bootstrap = broker.start()
    settings = Settings.load(
        {"bootstrap_servers": bootstrap, "topic_prefix": f"chaos-{uuid.uuid4().hex[:8]}.", "partitions": 4}
    )
    services = Services(settings, work, work / "archive")
    print(
        f"chaos: {args.trials} trials of {args.ticks} ticks, {args.rounds} round(s) of kills, "
        f"broker {bootstrap}, logs in {work}",
        file=sys.stderr,
    )
    try:
        report = asyncio.run(
            campaign(
                settings,
                broker,
                services,
                trials=args.trials,
                ticks=args.ticks,
                rounds=args.rounds,
                seed=args.seed,
                broker_down=args.broker_down,
            )
        )
    except BaseException:
        print_log_tails(work)  # the logs live in a temporary folder: say here why it stopped
        raise
    finally:
        services.stop()
        broker.stop()
    for d in report.differences[:20]:
        print(f"  {d}")
    print(report.line())
    if args.json:
        Path(args.json).write_text(json.dumps({**asdict(report), "ok": report.ok}, indent=2))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
