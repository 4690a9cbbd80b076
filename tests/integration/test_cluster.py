"""On a 3-node KRaft cluster started by the project's own script (``trialog broker start
--nodes 3``): topics get three copies by default, and a trial survives the broker that
leads its partition being killed mid-trial, then one of its services, and two brokers of
three being away for 20 s — the trajectory identical to a reference run's, nothing lost,
nothing doubled, no actor timed out although the spec gives the actors 5 s to answer, less
than the stall (the services' deadlines wait while the log is away); a handful of log lines
per service over the outage, all Trialog's own."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.integration.test_scale_and_recovery import trajectory
from tests.integration.test_trials import read_trial
from trialog.broker import cluster, process
from trialog.broker.config import BrokerConfig
from trialog.bus.kafka import KafkaBus
from trialog.controller import Controller
from trialog.protocol.events import ActorTimeout, TrialEnded
from trialog.protocol.topics import EVENTS
from trialog.settings import Settings
from trialog.tools.campaign import start_service, stop_services, wait_ready

pytestmark = pytest.mark.integration
NODES = 3
SPEC = str(Path(__file__).resolve().parent / "cluster.yaml")  # deadlines shorter than the outages


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive free ports (node K and its controller take two each)."""
    for base in range(21000, 40000, 2 * count + 2):
        taken = False
        for port in range(base, base + count):
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    taken = True
                    break
        if not taken:
            return base
    raise RuntimeError("no run of free ports")


def trialog_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trialog.cli", *args], capture_output=True, text=True, timeout=300)


def broker_cli(*args: str) -> subprocess.CompletedProcess:
    return trialog_cli("broker", *args)


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory):
    """The cluster as docs/broker.md starts it: ``trialog broker start --nodes 3``."""
    data_dir = tmp_path_factory.mktemp("cluster")
    config = BrokerConfig.from_env(data_dir=data_dir, port=free_port_run(2 * NODES), heap="384m")
    where = ("--data-dir", str(data_dir))
    started = broker_cli("start", "--nodes", str(NODES), *where, "--port", str(config.port), "--heap", "384m")
    assert started.returncode == 0, started.stderr[-3000:]
    bootstrap = started.stdout.strip().splitlines()[-1]
    try:
        assert bootstrap == ",".join(f"127.0.0.1:{config.port + 2 * k}" for k in range(NODES))
        status = broker_cli("status", *where)
        assert status.returncode == 0 and status.stdout.count("running: pid") == NODES, status.stdout
        yield config, bootstrap
    finally:
        stopped = broker_cli("stop", *where, "--timeout", "10")
        assert stopped.returncode == 0 and broker_cli("status", *where).returncode == 3, stopped.stderr[-3000:]
        shutil.rmtree(data_dir, ignore_errors=True)


async def restart(config: BrokerConfig) -> None:
    """The nodes that are not running started again, as an operator would: the CLI again."""
    where = ("--data-dir", str(config.data_dir), "--port", str(config.port), "--heap", "384m")
    started = await asyncio.to_thread(broker_cli, "start", "--nodes", str(NODES), *where, "--timeout", "180")
    assert started.returncode == 0, started.stderr[-3000:]


def first_difference(got: dict, expected: dict) -> tuple | None:
    """The first (kind, tick, actor) in tick order whose payload differs or is missing on one side."""
    keys = sorted(set(got) | set(expected), key=lambda k: (k[1], k[0] != "observation", k[2]))
    return next(((k, got.get(k), expected.get(k)) for k in keys if got.get(k) != expected.get(k)), None)


def said_of(tmp_path: Path, word: str) -> str:
    """The services' log lines with ``word`` in their event (e.g. a replay that differs from the log)."""
    lines = [
        f"{path.stem}: {line[:300]}"
        for path in sorted(tmp_path.glob("*.log"))
        for line in path.read_text(errors="replace").splitlines()
        if '"event"' in line and word in line.split('"event"', 1)[1][:120]
    ]
    return "the services said: " + (" | ".join(lines[-8:]) if lines else f"nothing with {word!r}")


async def leader_of(bus: KafkaBus, partition: int) -> int:
    admin = await bus._admin()
    try:
        (described,) = await admin.describe_topics([bus.settings.topic(EVENTS)])
        return next(p["leader"] for p in described["partitions"] if p["partition"] == partition)
    finally:
        await admin.close()


async def test_a_trial_survives_its_partition_leader_and_a_service_being_killed(three_nodes, tmp_path):
    config, bootstrap = three_nodes
    settings = Settings.load(
        {"bootstrap_servers": bootstrap, "topic_prefix": "cluster-test.", "partitions": 2}, environ={}
    )
    bus = KafkaBus(settings)
    await bus.create_topics()
    described = await bus.describe_topics()
    assert {(t["replication_factor"], t["configs"]["min.insync.replicas"]) for t in described.values()} == {(3, "2")}

    procs, ports = {}, {}
    for name in ("orchestrator", "actors", "environment"):
        procs[name], ports[name] = start_service(settings, SPEC, [name], tmp_path / f"{name}.log")
    try:
        wait_ready(procs, ports, tmp_path, timeout=180)
        async with Controller(bus) as ctl:
            trial = dict(seed=5)
            reference = await ctl.start_trial("cluster-test", **trial)
            assert (await ctl.wait_ended(reference, timeout=180)).reason == "max_ticks"

            tid = await ctl.start_trial("cluster-test", **trial)
            await wait_for(lambda: ctl.last_tick(tid) >= 10, timeout=120, what="tick 10")
            leader = await leader_of(bus, bus.partition_of(tid))
            victim = cluster.node_configs(config, NODES)[leader - 1]
            os.kill(process.status(victim).pid, signal.SIGKILL)
            killed_broker_at, stalled_from = ctl.last_tick(tid), time.monotonic()
            await wait_for(lambda: ctl.last_tick(tid) > killed_broker_at + 5, timeout=120, what="ticks after the kill")
            stall_s = time.monotonic() - stalled_from
            # What an operator sees meanwhile: the lost node's copies out of sync.
            on_cluster = ("--bootstrap-servers", bootstrap, "--topic-prefix", settings.topic_prefix)
            described = await asyncio.to_thread(trialog_cli, "topics", "describe", *on_cluster)
            assert "UNDER-REPLICATED" in described.stdout and "under-replicated" in described.stderr, described

            # Then a service: a standby joins the group, the first environment dies without a word.
            procs["standby"], ports["standby"] = start_service(
                settings, SPEC, ["environment"], tmp_path / "standby.log"
            )
            wait_ready({"standby": procs["standby"]}, {"standby": ports["standby"]}, tmp_path, timeout=120)
            procs["environment"].send_signal(signal.SIGKILL)
            killed_service_at = ctl.last_tick(tid)
            end = await ctl.wait_ended(tid, timeout=240)
            await restart(config)  # the killed node back

            # Two nodes of three away for 20 s (no quorum: nothing is written meanwhile).
            outage = await ctl.start_trial("cluster-test", **trial)
            await wait_for(lambda: ctl.last_tick(outage) >= 10, timeout=120, what="tick 10")
            logs = {name: tmp_path / f"{name}.log" for name in ("orchestrator", "actors", "standby")}
            before = {name: path.stat().st_size for name, path in logs.items()}
            for node in cluster.node_configs(config, NODES)[:2]:
                os.kill(process.status(node).pid, signal.SIGKILL)
            await asyncio.sleep(20)
            # Read before the nodes are started again: the trial may well tick to its end while
            # the restart waits for the last of them.
            stopped_at, restarting = ctl.last_tick(outage), time.monotonic()
            await restart(config)
            restart_s = time.monotonic() - restarting
            await wait_for(lambda: ctl.last_tick(outage) > stopped_at, timeout=240, what="a tick after the outage")
            resumed_s = time.monotonic() - restarting
            outage_end = await ctl.wait_ended(outage, timeout=240)
        assert killed_broker_at < killed_service_at < 80, (killed_broker_at, killed_service_at)
        assert end.reason == outage_end.reason == "max_ticks" and end.tick == outage_end.tick == 80
        async with bus:
            expected = trajectory(await read_trial(bus, reference))
            events = await read_trial(bus, tid)
            outage_events = await read_trial(bus, outage)
        # Timeouts first: a default action taken for a late actor changes the trajectory after it.
        timeouts = [(e.trial_id, e.tick, e.actor) for e in [*events, *outage_events] if isinstance(e, ActorTimeout)]
        assert not timeouts, f"actors timed out (trial, tick, actor): {timeouts}; {said_of(tmp_path, 'differ')}"
        for name, got in (("killed", events), ("outage", outage_events)):
            diverged = first_difference(trajectory(got), expected)
            assert diverged is None, (
                f"the {name} trial's trajectory differs from the reference's from {diverged} (the broker was "
                f"killed at tick {killed_broker_at}, the environment at {killed_service_at}); "
                f"{said_of(tmp_path, 'differ')}"
            )
        assert (
            sum(isinstance(e, TrialEnded) for e in events) == sum(isinstance(e, TrialEnded) for e in outage_events) == 1
        )
        print(f"partition leader {leader} killed at tick {killed_broker_at}: 5 more ticks after {stall_s:.1f} s")
        print(f"two nodes away for 20 s: the next tick {resumed_s:.1f} s after their restart began ({restart_s:.1f} s)")
        # What the outage cost in log lines: a few per service, not the Kafka client's thousands.
        for name, path in logs.items():
            with path.open("rb") as f:
                f.seek(before[name])
                lines = f.read().decode(errors="replace").splitlines()
            print(f"{name}: {len(lines)} lines during the outage and the recovery")
            print("\n".join(f"    {line[:200]}" for line in lines))
            assert len(lines) <= 10, f"{name} wrote {len(lines)} lines"
            assert not [line for line in lines if '"logger":"aiokafka' in line], "the client's lines, not Trialog's"
    except BaseException:
        for path in sorted(tmp_path.glob("*.log")):  # what Trialog's services said, for the failure's story
            said = [line for line in path.read_text(errors="replace").splitlines() if '"event"' in line]
            print(f"--- {path.name}\n" + "\n".join(line[:300] for line in said[-25:]))
        raise
    finally:
        stop_services(procs.values())
        # The killed node back, with the data it had: the cluster whole again for what follows.
        await restart(config)
        await bus.delete_topics()
