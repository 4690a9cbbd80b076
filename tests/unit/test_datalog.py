"""The datalog on the in-memory bus: the samples fold, late rewards, the archive round
trip, the logger's restart safety, export and re-simulation (integration tests
repeat the end-to-end parts on Kafka)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import wait_for
from tests.harness import deployment
from trialog.bus.memory import MemoryBus
from trialog.datalog.archive import Archive, file_name
from trialog.datalog.export import Filters, export_from_archive, export_from_topic
from trialog.datalog.replay import read_trial, replay
from trialog.datalog.samples import TrialFold
from trialog.datalog.verify import verify
from trialog.errors import CodecError
from trialog.examples.rps.game import RockPaperScissors
from trialog.protocol.events import Observation, Reward, TrialEnded
from trialog.protocol.rewards import aggregate
from trialog.protocol.topics import EVENTS, TRIALS
from trialog.services.logger.main import loop_for as logger_loop
from trialog.spec import load_spec

SPEC = Path(__file__).resolve().parents[2] / "examples" / "rps" / "spec.yaml"


class FlakyRps(RockPaperScissors):
    """Re-simulates differently from tick 5 on: the first player's score is off by one."""

    def update(self, actions):
        step = super().update(actions)
        if self.round < 5:
            return step
        first = self.players[0]
        observations = {
            **step.observations,
            first: {**step.observations[first], "my_score": step.observations[first]["my_score"] + 1},
        }
        return dataclasses.replace(step, observations=observations)


def events_of(bus: MemoryBus, tid: str) -> list:
    """The trial's decodable events, in log order."""
    out = []
    for r in bus.records(EVENTS):
        if r.trial_id == tid:
            try:
                out.append(bus.codec.decode(r.value, r.header("kind")))
            except CodecError:
                pass
    return out


async def run_trial(bus: MemoryBus, ctl, **kwargs) -> tuple[str, TrialEnded]:
    tid = await ctl.start_trial("rps", **kwargs)
    return tid, await ctl.wait_ended(tid, timeout=20)


@pytest.fixture
def bus(memory_settings):
    return MemoryBus(memory_settings)


async def folded_trial(bus: MemoryBus, seed: int) -> tuple[str, TrialEnded, TrialFold]:
    """One rock-paper-scissors trial run to its end, and its events folded."""
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid, ended = await run_trial(bus, ctl, seed=seed)
    fold = TrialFold(tid, bus.store)
    for event in events_of(bus, tid):
        fold.add(event)
    return tid, ended, fold


async def test_fold_makes_one_sample_per_tick_and_actor(bus):
    tid, ended, fold = await folded_trial(bus, seed=3)
    samples = fold.samples()
    assert fold.check() == []
    assert [(s.tick, s.actor) for s in samples] == [(t, a) for t in range(ended.tick + 1) for a in ("alice", "bob")]
    final = [s for s in samples if s.tick == ended.tick]
    assert all(s.final and s.action is None and s.action_avro is None for s in final)
    assert all(s.action in ("ROCK", "PAPER", "SCISSORS") for s in samples if s.tick < ended.tick)
    assert all(isinstance(s.observation, dict) and s.observation["round"] == s.tick for s in samples)
    rewards = [e for e in events_of(bus, tid) if isinstance(e, Reward)]
    assert sum(s.reward for s in samples) == pytest.approx(sum(r.value for r in rewards))
    assert all(len(s.reward_sources) == 1 for s in samples if s.tick < ended.tick)


async def test_samples_are_values_equal_and_hashed_by_what_was_logged(bus):
    """Samples are plain slots dataclasses (cheap to make), still compared and hashed as values:
    by the logged bytes and fields, never by the decoded payloads."""
    _, _, fold = await folded_trial(bus, seed=4)
    first, again = fold.samples(), fold.samples()
    assert first == again and {hash(s) for s in first} == {hash(s) for s in again}
    assert len(set(first) | set(again)) == len(first)  # usable in sets and as keys, duplicates merged
    same_bytes = dataclasses.replace(first[0], observation="decoded differently", action=object())
    assert same_bytes == first[0] and hash(same_bytes) == hash(first[0])
    other_reward = dataclasses.replace(first[0], reward=first[0].reward + 1)
    assert other_reward != first[0]
    assert not hasattr(first[0], "__dict__")  # slots: no per-sample dict


async def test_a_learner_asking_for_each_step_decodes_each_observation_once(bus):
    """A learner asks for the sample of tick t and of t+1 at each step (the step's observation and
    the one after it): each observation is decoded once, and every sample is what samples() makes."""
    _, ended, fold = await folded_trial(bus, seed=5)
    decoded = []
    decode = fold.store.decode
    fold.store.decode = lambda payload, schema: decoded.append(schema) or decode(payload, schema)
    try:
        asked = [(fold.sample(t, a), fold.sample(t + 1, a)) for t in range(ended.tick) for a in ("alice", "bob")]
    finally:
        del fold.store.decode
    observation_schemas = {id(s.observation) for s in fold.schemas.values()}
    observations = sum(1 for schema in decoded if id(schema) in observation_schemas)
    assert observations == 2 * (ended.tick + 1)  # ticks 0..end, two players: once each
    made = {(x.tick, x.actor): x for x in fold.samples()}
    assert all(now == made[(now.tick, now.actor)] and after == made[(after.tick, after.actor)] for now, after in asked)


async def test_late_reward_changes_the_aggregate_and_duplicates_do_not(bus):
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid, _ = await run_trial(bus, ctl, seed=4)
        before = [s async for s in replay(bus, tid)]
        for _ in range(2):  # the same reward twice is one reward (I-8)
            await ctl.send_reward(tid, "alice", 10.0, tick=3, confidence=3.0, sender="judge")
        after = [s async for s in replay(bus, tid)]
    old = next(s for s in before if (s.tick, s.actor) == (3, "alice"))
    new = next(s for s in after if (s.tick, s.actor) == (3, "alice"))
    assert len(new.reward_sources) == len(old.reward_sources) + 1
    assert new.reward == pytest.approx(aggregate(new.reward_sources))
    assert new.reward == pytest.approx((old.reward * 1.0 + 10.0 * 3.0) / 4.0)
    assert [s for s in after if (s.tick, s.actor) != (3, "alice")] == [
        s for s in before if (s.tick, s.actor) != (3, "alice")
    ]


async def test_logger_archives_and_corrects_late_rewards(bus, tmp_path):
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (d, ctl):
        [loop] = d.add([logger_loop(bus, tmp_path, grace_s=0.1)])
        archive = Archive(tmp_path)
        tids = [(await run_trial(bus, ctl, seed=s))[0] for s in (1, 2)]
        await wait_for(lambda: all(Archive(tmp_path).entry(t) for t in tids), timeout=10, what="archives")
        for tid in tids:
            assert archive.read(tid).samples == [s async for s in replay(bus, tid)]
        await ctl.send_reward(tids[0], "*", 5.0, tick=3, sender="late-judge")
        await wait_for(
            lambda: list((tmp_path / "corrections" / file_name(tids[0])).glob("*.parquet")),
            timeout=10,
            what="correction",
        )
        archived = Archive(tmp_path).read(tids[0])
        replayed = [s async for s in replay(bus, tids[0])]
        assert archived.samples == replayed
        assert sum(1 for s in archived.samples for r in s.reward_sources if r.sender == "late-judge") == 2
        entry = archived.entry
        assert entry["status"] == "ended" and entry["problems"] == [] and entry["samples"] == len(replayed)
        assert loop.handler.stats["archived"] == 2


async def test_logger_corrects_a_reward_an_observation_carries_after_the_archive(bus, tmp_path):
    """An observation logged after its trial was archived (its environment raced the end) does not
    count; the reward it carries does, as a reward record would: a correction, as replay reads it."""
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (d, ctl):
        d.add([logger_loop(bus, tmp_path, grace_s=0.1)])
        tid, ended = await run_trial(bus, ctl, seed=3)
        await wait_for(lambda: Archive(tmp_path).entry(tid), timeout=10, what="archive")
        final = next(
            e for e in events_of(bus, tid) if isinstance(e, Observation) and (e.tick, e.actor) == (ended.tick, "alice")
        )
        await bus.send_many([bus.to_record(EVENTS, dataclasses.replace(final, reward=7.0))])
        await wait_for(
            lambda: list((tmp_path / "corrections" / file_name(tid)).glob("*.parquet")), timeout=10, what="correction"
        )
        archived = Archive(tmp_path).read(tid)
        replayed = [s async for s in replay(bus, tid)]
    assert archived.samples == replayed
    last = next(s for s in archived.samples if (s.tick, s.actor) == (ended.tick - 1, "alice"))
    assert [r.value for r in last.reward_sources if r.sender == "env"] == [7.0]


async def test_logger_restart_rewrites_nothing_and_loses_nothing(bus, tmp_path):
    """Stop the logger while trials are still in their grace period and let another
    instance of the group take over: every trial is archived once, complete."""
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (d, ctl):
        first = logger_loop(bus, tmp_path, grace_s=3600)  # never archives: its trials stay pending
        task = asyncio.create_task(first.run())
        tids = [(await run_trial(bus, ctl, seed=s))[0] for s in (5, 6, 7)]
        await wait_for(lambda: len(first.handler.trials) == 3, timeout=10, what="first logger saw the trials")
        task.cancel()  # abrupt: no drain, no final commit
        await asyncio.gather(task, return_exceptions=True)
        bus.groups["logger"].clear()  # the dead member leaves the group (session timeout)
        second = d.add([logger_loop(bus, tmp_path, grace_s=0.1)])[0]
        await wait_for(lambda: all(Archive(tmp_path).entry(t) for t in tids), timeout=10, what="archives")
        await ctl.send_reward(tids[1], "bob", 1.0, tick=2, sender="late")
        await wait_for(lambda: second.handler.stats["corrections"] == 1, timeout=10, what="correction")
        second.stop()
        third = d.add([logger_loop(bus, tmp_path, grace_s=0.1)])[0]  # replays from the committed offsets
        await third.ready.wait()
        await asyncio.sleep(0.5)
        assert third.handler.stats == {"archived": 0, "corrections": 0}
    archive = Archive(tmp_path)
    lines = (tmp_path / "catalog.jsonl").read_text().splitlines()
    assert len(lines) == 3
    for tid in tids:
        fold = TrialFold(tid, bus.store)
        for e in events_of(bus, tid):
            fold.add(e)
        assert archive.read(tid).samples == fold.samples()
    assert len(list((tmp_path / "corrections").rglob("*.parquet"))) == 1


async def test_rewriting_a_trial_gives_the_same_file(bus, tmp_path):
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid, _ = await run_trial(bus, ctl, seed=8)
        fold = await read_trial(bus, tid)
    files = []
    for name in ("a", "b"):
        Archive(tmp_path / name).write_trial(fold, partition=0, start_offset=0, cut_offset=99, started_ms=1, ended_ms=2)
        files.append((tmp_path / name / "trials" / f"{tid}.parquet").read_bytes())
    assert files[0] == files[1]


async def test_bad_input_is_reported_not_fatal(bus, tmp_path):
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (d, ctl):
        [loop] = d.add([logger_loop(bus, tmp_path, grace_s=0.1, idle_s=0.5)])
        tid, ended = await run_trial(bus, ctl, seed=9)
        key = tid.encode()
        # Garbage from a writer holding a key (a forged one would be refused before decoding).
        headers = [("kind", b"reward"), ("tick", b"1")]
        await bus.send_many(
            [(EVENTS, key, b"\xc3\x01garbage", headers + bus.trust.tag(tid, headers, b"\xc3\x01garbage"))]
        )
        await ctl.send_reward(tid, "nobody", 1.0, tick=1, sender="x")
        await wait_for(lambda: Archive(tmp_path).entry(tid), timeout=10, what="archive")
        problems = Archive(tmp_path).entry(tid)["problems"]
    assert any("undecodable" in p for p in problems), problems
    assert loop.handler.stats["archived"] == 1
    # A trial with a gap and no end: the fold says so, and still yields what it has.
    events = [
        e
        for e in events_of(bus, tid)
        if not (isinstance(e, Observation) and e.tick == 2) and not isinstance(e, TrialEnded)
    ]
    fold = TrialFold(tid, bus.store)
    for e in events:
        fold.add(e)
    found = fold.check()
    assert any("no trial.ended" in p for p in found)
    assert any("tick(s) 2" in p for p in found)
    assert len(fold.samples()) == 2 * (ended.tick + 1) - 2


async def test_export_from_topic_and_archive_agree(bus, tmp_path):
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (d, ctl):
        d.add([logger_loop(bus, tmp_path / "archive", grace_s=0.1)])
        tids = [(await run_trial(bus, ctl, seed=s))[0] for s in (10, 11, 12)]
        await wait_for(lambda: all(Archive(tmp_path / "archive").entry(t) for t in tids), timeout=10, what="archives")
        topic = await export_from_topic(bus, tmp_path / "topic.parquet", Filters(spec="rps", status="ended"))
        only_bob = await export_from_topic(bus, tmp_path / "bob.parquet", Filters(implementation="counter"))
        none = await export_from_topic(bus, tmp_path / "none.parquet", Filters(spec="other"))
    archived = export_from_archive(Archive(tmp_path / "archive"), tmp_path / "archive.parquet", Filters(spec="rps"))
    a, b = pq.read_table(tmp_path / "topic.parquet"), pq.read_table(tmp_path / "archive.parquet")
    assert topic.rows == archived.rows == a.num_rows == b.num_rows
    assert topic.trials == 3 and none.rows == 0 and pq.read_table(tmp_path / "none.parquet").num_rows == 0
    assert (
        set(pq.read_table(tmp_path / "bob.parquet")["actor"].to_pylist()) == {"bob"}
        and only_bob.rows == a.num_rows // 2
    )
    key = ["trial_id", "tick", "actor"]
    assert a.sort_by([(k, "ascending") for k in key]).equals(b.sort_by([(k, "ascending") for k in key]))


async def test_export_takes_a_trial_status_from_the_log_when_the_index_lags(bus, tmp_path):
    # The orchestrator indexes a trial.ended once it reads it back: for a moment the
    # index still says running. An export of ended trials made then must find them.
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid, ended = await run_trial(bus, ctl, seed=13)
        await wait_for(
            lambda: any(r.trial_id == tid and r.value for r in bus.records(TRIALS)), timeout=10, what="index"
        )
        record = (await ctl.list_trials())[-1]
        assert record.status == "ended"
        await bus.publish(
            TRIALS, dataclasses.replace(record, status="running", end_offset=None)
        )  # the index of a moment ago
        ended_only = await export_from_topic(bus, tmp_path / "ended.parquet", Filters(status="ended"))
        running_only = await export_from_topic(bus, tmp_path / "running.parquet", Filters(status="running"))
    assert ended_only.trials == 1 and ended_only.rows == 2 * (ended.tick + 1)
    assert running_only.trials == 0 and pq.read_table(tmp_path / "running.parquet").num_rows == 0


async def test_verify_passes_on_rps_and_pinpoints_a_flaky_env(bus):
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid, ended = await run_trial(bus, ctl, seed=13, max_ticks=12)
        fold = await read_trial(bus, tid)
    verdict = verify(fold.started, fold.samples(), bus.store, spec)
    assert verdict.ok, verdict
    assert verdict.ticks == ended.tick + 1
    # The environment comes from the local spec by name, whatever entry the record carries.
    forged = dataclasses.replace(fold.started, environment_entry="this:s")
    assert verify(forged, fold.samples(), bus.store, spec).ok
    flaky = dataclasses.replace(
        spec, environments={"rps": dataclasses.replace(spec.environments["rps"], entry=f"{__name__}:FlakyRps")}
    )
    verdict = verify(fold.started, fold.samples(), bus.store, flaky)
    assert ended.tick >= 5  # first to 5 wins: at least 5 rounds
    assert not verdict.ok and verdict.tick == 5 and "my_score" in verdict.details


async def test_follow_tails_a_live_trial(bus):
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("rps", seed=14)
        followed = [s async for s in replay(bus, tid, follow=True)]
        assert followed == [s async for s in replay(bus, tid)]
        assert followed[-1].final


async def test_cli_replays_and_exports_an_archive(bus, tmp_path, capsys):
    import orjson

    from trialog import cli

    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (d, ctl):
        d.add([logger_loop(bus, tmp_path, grace_s=0.1)])
        tid, ended = await run_trial(bus, ctl, seed=15)
        await wait_for(lambda: Archive(tmp_path).entry(tid), timeout=10, what="archive")
    capsys.readouterr()
    assert cli.main(["replay", tid, "--from-archive", str(tmp_path), "--json"]) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 2 * (ended.tick + 1) and lines[0]["observation"]["round"] == 0 and lines[-1]["final"]
    assert cli.main(["replay", tid, "--from-archive", str(tmp_path)]) == 0
    assert "reward=" in capsys.readouterr().out
    capsys.readouterr()
    assert cli.main(["replay", tid, "--from-archive", str(tmp_path), "--verify"]) == 1
    assert "pass --spec FILE" in capsys.readouterr().err
    assert cli.main(["replay", tid, "--from-archive", str(tmp_path), "--verify", "--spec", str(SPEC)]) == 0
    assert "deterministic" in capsys.readouterr().out
    out = tmp_path / "x.parquet"
    assert (
        cli.main(
            ["export", "--out", str(out), "--from-archive", str(tmp_path), "--spec", str(SPEC), "--since", "2000-01-01"]
        )
        == 0
    )
    assert pq.read_table(out).num_rows == len(lines)
    assert cli.main(["export", "--out", str(out), "--from-archive", str(tmp_path), "--until", "2000-01-01"]) == 0
    assert pq.read_table(out).num_rows == 0


async def test_a_trial_that_never_started_is_not_archived(bus, tmp_path):
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (d, ctl):
        [loop] = d.add([logger_loop(bus, tmp_path, grace_s=0.1)])
        tid = await ctl.start_trial("rps", implementations={"alice": "human"})  # waits for a client to join
        await wait_for(lambda: tid in loop.handler.trials, timeout=10, what="pending trial seen")
        await ctl.terminate(tid, hard=True)
        await ctl.wait_ended(tid, timeout=10)
        await wait_for(lambda: not loop.handler.trials, timeout=10, what="logger forgets it")
    assert Archive(tmp_path).entry(tid) is None and loop.handler.stats["archived"] == 0
