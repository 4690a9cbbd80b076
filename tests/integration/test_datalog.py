"""The datalog on a real Kafka broker: archive = replay, late rewards, logger restart,
re-simulation, export read back with DuckDB."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest

from tests.conftest import wait_for
from tests.harness import deployment
from trialog import cli
from trialog.bus.kafka import KafkaBus
from trialog.datalog.archive import Archive, file_name
from trialog.datalog.replay import partition_records, replay
from trialog.examples.rps.game import RockPaperScissors
from trialog.protocol.events import Observation, Reward
from trialog.protocol.rewards import aggregate
from trialog.protocol.trial import matches
from trialog.services.logger.main import loop_for as logger_loop
from trialog.spec import load_spec

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

SPEC = f"""
name: datatest
actor_classes:
  player:
    observation: {ROOT / "examples" / "rps" / "observation.avsc"}
    action: {{type: enum, name: rps.Move, symbols: [ROCK, PAPER, SCISSORS]}}
    default_action: ROCK
environments:
  rps: {{entry: "trialog.examples.rps.game:RockPaperScissors", config: {{target_score: 5}}}}
  slow: {{entry: "tests.integration.fixtures:SlowRps", config: {{target_score: 1000, delay_s: 0.05}}}}
  flaky: {{entry: "tests.integration.test_datalog:FlakyRps", config: {{target_score: 5}}}}
actors:
  random: {{entry: "trialog.examples.rps.players:RandomPlayer"}}
  counter: {{entry: "trialog.examples.rps.players:CounterPlayer"}}
trial:
  environment: rps
  actors:
    - {{name: alice, class: player, implementation: random}}
    - {{name: bob, class: player, implementation: counter}}
  max_ticks: 40
  response_timeout_ms: 5000
  timeout_policy: default_action
  inactivity_timeout_ms: 20000
"""


class FlakyRps(RockPaperScissors):
    """Re-simulates differently from tick 5 on: each instance numbers its rounds
    from its own place in a process-wide count (state that is not in the seed)."""

    instances = itertools.count(1)

    def start(self):
        self.instance = next(self.instances)
        return super().start()

    def update(self, actions):
        step = super().update(actions)
        if self.round < 5:
            return step
        first = self.players[0]
        observations = {
            **step.observations,
            first: {**step.observations[first], "round": self.round * 1000 + self.instance},
        }
        return dataclasses.replace(step, observations=observations)


@pytest.fixture
async def running(kafka_settings, tmp_path):
    (tmp_path / "datatest.yaml").write_text(SPEC)
    bus = KafkaBus(kafka_settings)
    spec = load_spec(tmp_path / "datatest.yaml", bus.store)
    async with deployment(bus, spec) as (d, ctl):
        yield bus, d, ctl


async def log_of(bus: KafkaBus, tid: str) -> list:
    out = []
    async for r in partition_records(bus, bus.partition_of(tid), 0):
        if r.trial_id == tid:
            out.append(bus.codec.decode(r.value, r.header("kind")))
    return out


def archived(path: Path, tids) -> bool:
    archive = Archive(path)
    return all(archive.entry(t) for t in tids)


async def test_archive_equals_replay_and_keeps_late_rewards(running, tmp_path):
    bus, d, ctl = running
    d.add([logger_loop(bus, tmp_path / "archive", grace_s=0.5)])
    tids = [await ctl.start_trial("datatest", seed=s) for s in (1, 2)]
    for tid in tids:
        await ctl.wait_ended(tid, timeout=60)
    await wait_for(lambda: archived(tmp_path / "archive", tids), timeout=30, what="archives")
    for tid in tids:
        assert Archive(tmp_path / "archive").read(tid).samples == [s async for s in replay(bus, tid)]

    await ctl.send_reward(tids[0], "alice", 7.0, tick=3, confidence=2.0, sender="late-judge")
    await wait_for(
        lambda: list((tmp_path / "archive" / "corrections" / file_name(tids[0])).glob("*.parquet")),
        timeout=30,
        what="correction",
    )
    from_archive = Archive(tmp_path / "archive").read(tids[0]).samples
    from_topic = [s async for s in replay(bus, tids[0])]
    assert from_archive == from_topic
    tick3 = next(s for s in from_topic if (s.tick, s.actor) == (3, "alice"))
    assert [r.sender for r in tick3.reward_sources] == ["env", "late-judge"]
    assert tick3.reward == pytest.approx(aggregate(tick3.reward_sources))


async def test_logger_killed_mid_stream_loses_and_duplicates_nothing(running, tmp_path):
    bus, d, ctl = running
    archive_dir = tmp_path / "archive"
    first = logger_loop(bus, archive_dir, grace_s=0.5)
    task = asyncio.create_task(first.run())
    tids = [await ctl.start_trial("datatest", environment="slow", max_ticks=30, seed=s) for s in range(4)]
    await wait_for(
        lambda: sum(len(t.fold.samples()) for t in first.handler.trials.values()) >= 20,
        timeout=60,
        what="logger mid-stream",
    )
    task.cancel()  # killed mid-stream
    await asyncio.gather(task, return_exceptions=True)
    second = d.add([logger_loop(bus, archive_dir, grace_s=0.5)])[0]
    for tid in tids:
        await ctl.wait_ended(tid, timeout=120)
    await wait_for(lambda: archived(archive_dir, tids), timeout=60, what="archives after restart")
    archive = Archive(archive_dir)
    assert len((archive_dir / "catalog.jsonl").read_text().splitlines()) == len(tids)
    for tid in tids:
        samples = archive.read(tid).samples
        keys = [(s.tick, s.actor) for s in samples]
        assert len(keys) == len(set(keys)) == 2 * (archive.entry(tid)["ticks"] + 1)
        assert samples == [s async for s in replay(bus, tid)]
    assert second.handler.stats["archived"] + first.handler.stats["archived"] == len(tids)


async def test_verify_passes_on_rps_and_pinpoints_a_flaky_env(running, capsys, tmp_path):
    bus, _, ctl = running
    spec_file = str(tmp_path / "datatest.yaml")
    good = await ctl.start_trial("datatest", seed=21)
    bad = await ctl.start_trial("datatest", seed=22, environment="flaky")
    for tid in (good, bad):
        await ctl.wait_ended(tid, timeout=60)
    flags = [
        "--bootstrap-servers",
        bus.settings.bootstrap_servers,
        "--topic-prefix",
        bus.settings.topic_prefix,
        "--partitions",
        "4",
    ]
    assert await asyncio.to_thread(cli.main, ["replay", good, "--verify", "--spec", spec_file, *flags]) == 0
    assert "deterministic" in capsys.readouterr().out
    assert await asyncio.to_thread(cli.main, ["replay", bad, "--verify", "--spec", spec_file, *flags]) == 1
    assert "differs at tick 5" in capsys.readouterr().out


async def test_export_read_back_with_duckdb_matches_the_log(running, tmp_path):
    bus, d, ctl = running
    d.add([logger_loop(bus, tmp_path / "archive", grace_s=0.3)])
    tids = [await ctl.start_trial("datatest", seed=s) for s in (31, 32, 33)]
    for tid in tids:
        await ctl.wait_ended(tid, timeout=60)
    await ctl.send_reward(tids[1], "*", 3.0, tick=2, sender="late")
    flags = [
        "--bootstrap-servers",
        bus.settings.bootstrap_servers,
        "--topic-prefix",
        bus.settings.topic_prefix,
        "--partitions",
        "4",
    ]
    out = tmp_path / "export.parquet"
    assert (
        await asyncio.to_thread(
            cli.main, ["export", "--out", str(out), "--spec", "datatest", "--status", "ended", *flags]
        )
        == 0
    )

    # What the log says, computed independently of the datalog package.
    rows, reward_sum = 0, 0.0
    for tid in tids:
        events = await log_of(bus, tid)
        rows += sum(1 for e in events if isinstance(e, Observation))
        per_tick = defaultdict(list)
        # Reward records, and the environment's rewards the observations carry (the same rewards).
        carried = [e.carried_reward() for e in events if isinstance(e, Observation) and e.reward is not None]
        for e in [*events, *carried]:
            if isinstance(e, Reward):
                for actor in ("alice", "bob"):
                    if matches(e.receiver, actor, "player"):
                        per_tick[(actor, e.tick)].append(e)
        reward_sum += sum(aggregate(rs) for rs in per_tick.values())

    con = duckdb.connect()
    count, total, trials = con.execute(
        f"select count(*), sum(reward), count(distinct trial_id) from '{out}'"
    ).fetchone()
    assert (count, trials) == (rows, 3)
    assert total == pytest.approx(reward_sum)
    late = con.execute(
        f"select count(*) from (select unnest(reward_sources) as r from '{out}') where r.sender = 'late'"
    ).fetchone()[0]
    assert late == 2

    # The late reward lands in the trial file (within the grace period) or in a correction: either way it counts once.
    # Waited for as such: the trial files may be written before the correction that follows them.
    def late_archived() -> bool:
        if not archived(tmp_path / "archive", tids):
            return False
        samples = Archive(tmp_path / "archive").read(tids[1]).samples
        return any(r.sender == "late" for s in samples for r in s.reward_sources)

    await wait_for(late_archived, timeout=30, what="the late reward in the archive")
    out2 = tmp_path / "from-archive.parquet"
    assert (
        await asyncio.to_thread(cli.main, ["export", "--out", str(out2), "--from-archive", str(tmp_path / "archive")])
        == 0
    )
    count2, total2 = con.execute(f"select count(*), sum(reward) from '{out2}'").fetchone()
    assert count2 == rows and total2 == pytest.approx(reward_sum)


async def test_follow_yields_samples_while_the_trial_runs(running):
    bus, _, ctl = running
    tid = await ctl.start_trial("datatest", environment="slow", max_ticks=30, seed=41)
    followed, tick_when_first = [], None
    async for sample in replay(bus, tid, follow=True):
        if tick_when_first is None:
            tick_when_first = ctl.last_tick(tid)
        followed.append(sample)
    assert tick_when_first is not None and tick_when_first < 29  # the first sample came long before the end
    assert followed == [s async for s in replay(bus, tid)]
    assert followed[-1].final and len(followed) == 2 * 31
