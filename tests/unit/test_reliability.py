"""The reliability rules in memory: who owns a bad record, headers checked against bodies,
and the datalog folding what the runtime applied (early actions, corrections, events after
the end). Integration tests repeat them against the real broker."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import pytest
import structlog

from tests.harness import deployment
from tests.unit.test_datalog import events_of, run_trial
from trialog.bus.memory import MemoryBus, MemoryConsumer
from trialog.controller import Controller
from trialog.datalog.samples import TrialFold
from trialog.errors import CodecError, TransportError, TrialError
from trialog.protocol.events import Action, ActorTimeout, Message, Observation, Reward, TrialEnded
from trialog.protocol.owners import check_headers, owner_of, reward_problem
from trialog.protocol.roles import ACTORS, ENVIRONMENT, ORCHESTRATOR
from trialog.protocol.topics import EVENTS
from trialog.runtime import log_watch, service
from trialog.spec import load_spec

SPEC = Path(__file__).resolve().parents[2] / "examples" / "rps" / "spec.yaml"
SLOW = Path(__file__).resolve().parents[1] / "integration" / "trialtest.yaml"  # its "slow" RPS takes 50 ms a tick


@pytest.fixture
def bus(memory_settings):
    return MemoryBus(memory_settings)


def test_every_kind_has_one_owner_and_unknown_kinds_go_to_the_orchestrator():
    assert owner_of("action") == owner_of("parameters.changed") == owner_of("actor.timeout") == ENVIRONMENT
    assert owner_of("observation") == ACTORS
    for kind in ("reward", "message", "trial.started", "trial.ended", "trial.start", "bogus", "", None):
        assert owner_of(kind) == ORCHESTRATOR


def test_headers_must_say_what_the_body_says():
    action = Action("t1", tick=3, actor="alice", payload=b"x")
    check_headers(b"t1", action.headers(), action)
    with pytest.raises(CodecError, match="tick header '?1000000'? but body 3"):
        check_headers(b"t1", Action("t1", tick=1_000_000, actor="alice").headers(), action)
    with pytest.raises(CodecError, match="record key"):
        check_headers(b"t2", action.headers(), action)
    with pytest.raises(CodecError, match="kind header"):
        check_headers(b"t1", [], action)


@pytest.mark.parametrize(
    "reward, problem",
    [
        (Reward("t", tick=2, confidence=float("nan")), "confidence nan"),
        (Reward("t", tick=2, confidence=float("inf")), "confidence inf"),
        (Reward("t", tick=2, confidence=-0.5), "confidence -0.5"),
        (Reward("t", tick=2, value=float("-inf")), "value -inf"),
        (Reward("t", tick=6), "between 0 and the current one (5)"),
        (Reward("t", tick=-1), "between 0 and the current one (5)"),
        (Reward("t", tick=2, receiver="carol"), "addresses no actor"),
        (Reward("t", tick=2, user_data="{"), "not valid JSON"),
    ],
)
def test_rewards_that_cannot_count(reward, problem):
    assert problem in reward_problem(reward, 5, {"alice": "player", "bob": "player"})
    assert reward_problem(Reward("t", tick=5, receiver="player.*", confidence=0.0), 5, {"alice": "player"}) is None


async def test_fold_keeps_what_was_applied_corrections_and_nothing_after_the_end(bus):
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid, ended = await run_trial(bus, ctl, seed=5)
    events = events_of(bus, tid)
    move = bus.store.get("rps.Move")
    obs3 = next(i for i, e in enumerate(events) if isinstance(e, Observation) and (e.tick, e.actor) == (3, "alice"))
    observed = events[obs3].payload
    applied = next(e for e in events[obs3:] if isinstance(e, Action) and (e.tick, e.actor) == (3, "alice"))
    forged = move.encode("PAPER" if bus.store.decode(applied.payload, move) != "PAPER" else "ROCK")
    # An early action for tick 3 (logged at tick 1) and an early reward: neither was applied.
    events.insert(obs3 - 4, Action(tid, tick=3, actor="alice", payload=forged))
    events.insert(obs3 - 4, Reward(tid, tick=3, receiver="alice", value=99.0, sender="env"))
    # A correction from one sender for one tick: the later one counts; a repeat changes nothing.
    events += [
        Reward(tid, tick=2, receiver="alice", value=0.0, sender="judge"),
        Reward(tid, tick=2, receiver="alice", value=4.0, sender="judge"),
    ] * 2
    # An observation written as the trial was ended elsewhere, and a message after the end.
    end = next(i for i, e in enumerate(events) if isinstance(e, TrialEnded))
    events.insert(end + 1, Observation(tid, tick=ended.tick + 1, actor="alice", payload=observed))
    events.insert(
        end + 1, Message(tid, tick=ended.tick, sender="bob", receivers=("alice",), message_id="late", payload="{}")
    )
    fold = TrialFold(tid, bus.store)
    for e in events:
        fold.add(e)
    samples = {(s.tick, s.actor): s for s in fold.samples()}
    assert samples[(3, "alice")].action_avro == applied.payload
    assert all(r.value != 99.0 for r in samples[(3, "alice")].reward_sources)
    judge = [r for r in samples[(2, "alice")].reward_sources if r.sender == "judge"]
    assert [r.value for r in judge] == [4.0]
    assert max(t for t, _ in samples) == ended.tick
    assert all(not s.messages for s in samples.values())


async def test_a_tick_logged_just_before_the_orchestrator_ended_the_trial_is_not_part_of_it(bus):
    # The orchestrator ends a trial on its wall clock at the latest tick it has read; the
    # environment may already have logged the next tick's observations and rewards, ahead
    # of the end in the log (a CI run: samples up to tick 48 of a trial ended at 47).
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid, ended = await run_trial(bus, ctl, seed=6)
    events = events_of(bus, tid)
    end = next(i for i, e in enumerate(events) if isinstance(e, TrialEnded))
    # Ended one tick earlier: the last tick's observations, and a reward for it, precede the end.
    cut = dataclasses.replace(ended, tick=ended.tick - 1, reason="wall_clock")
    events[end] = cut
    events.insert(end, Reward(tid, tick=ended.tick, receiver="alice", value=7.0, sender="env"))
    assert any(isinstance(e, Observation) and e.tick == ended.tick for e in events[:end])
    fold = TrialFold(tid, bus.store)
    for e in events:
        fold.add(e)
    assert max(s.tick for s in fold.samples()) == cut.tick
    assert fold.check() == []
    assert fold.ended == cut


def failing_sends(bus, monkeypatch, count: float) -> list[int]:
    """Make the bus refuse its next ``count`` sends, as Kafka does while a broker is away."""
    original, refused = bus.send_many, []

    async def send_many(items, **kwargs):
        if len(refused) < count:
            refused.append(len(items))
            raise TransportError("Kafka refused a record: KafkaConnectionError (test)")
        return await original(items, **kwargs)

    monkeypatch.setattr(bus, "send_many", send_many)
    monkeypatch.setattr(service, "RETRY_BACKOFF_MAX_S", 0.01)
    return refused


async def test_outputs_kafka_refuses_are_retried_until_sent(bus, monkeypatch):
    """However long Kafka refuses (more attempts than any fixed limit would allow), the
    outputs go out once it takes them again: the trial ends as usual, every tick once."""
    spec = load_spec(SLOW, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("trialtest", environment="slow", max_ticks=30)
        await asyncio.sleep(0.2)
        refused = failing_sends(bus, monkeypatch, 40)
        ended = await ctl.wait_ended(tid, timeout=20)
    assert len(refused) == 40 and (ended.reason, ended.tick) == ("max_ticks", 30)
    fold = TrialFold(tid, bus.store)
    for event in events_of(bus, tid):
        fold.add(event)
    assert fold.check() == []
    assert [(s.tick, s.actor) for s in fold.samples()] == [
        (t, a) for t in range(ended.tick + 1) for a in ("alice", "bob")
    ]


async def test_a_service_stopping_while_kafka_refuses_gives_up_and_commits_nothing_more(bus, monkeypatch):
    """Stopping must not wait for Kafka forever, and must not commit past the records whose
    outputs were never sent: the next owner resumes before them and redoes the work."""
    spec = load_spec(SLOW, bus.store)
    async with deployment(bus, spec) as (d, ctl):
        tid = await ctl.start_trial("trialtest", environment="slow", max_ticks=30)
        await asyncio.sleep(0.2)
        failing_sends(bus, monkeypatch, float("inf"))
        await asyncio.sleep(0.3)
        committed = {group: dict(offsets) for group, offsets in bus.committed.items()}
        stuck = [loop for loop in d.loops if loop._out or (loop._flushing and not loop._flushing.done())]
        assert stuck, "no service had outputs to send"
        for loop in d.loops:
            loop.stop()
        await asyncio.wait_for(asyncio.gather(*d.tasks), 10)
        assert all(loop._gave_up for loop in stuck)
        assert {bus.settings.group(loop.group): bus.committed[bus.settings.group(loop.group)] for loop in stuck} == {
            bus.settings.group(loop.group): committed.get(bus.settings.group(loop.group), {}) for loop in stuck
        }
        monkeypatch.undo()  # the deployment's own stop, and the controller's, can send again
    assert not [e for e in events_of(bus, tid) if isinstance(e, TrialEnded)], "the trial cannot have ended"


def test_publish_backoff_doubles_up_to_its_ceiling_for_any_number_of_attempts():
    assert [service.retry_backoff(a) for a in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    assert service.retry_backoff(5000) == service.RETRY_BACKOFF_MAX_S


async def test_the_controller_returns_count_nothing_past_the_end_tick_as_the_datalog(bus):
    # The race above, seen live: observations and a reward of the tick after the end's
    # reach the controller; its returns leave them out, as the datalog does.
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid, ended = await run_trial(bus, ctl, seed=7)
        before = ctl.returns(tid)
        observed = next(e for e in events_of(bus, tid) if isinstance(e, Observation))
        await bus.publish(EVENTS, dataclasses.replace(observed, tick=ended.tick + 1))
        await asyncio.sleep(0.2)
        assert ctl.last_tick(tid) == ended.tick + 1
        await ctl.send_reward(tid, "alice", 100.0, tick=ended.tick + 1, sender="judge")
        await ctl.send_reward(tid, "alice", 1.0, tick=ended.tick, sender="judge")
        await asyncio.sleep(0.2)
        after = ctl.returns(tid)
    assert after == {**before, "alice": before["alice"] + 1.0}


async def test_an_outage_of_the_log_is_said_once_per_process_and_its_end_too(bus, monkeypatch):
    """While Kafka refuses, the process says once that the log is away (since when, what waits),
    and once that it is back; the retries in between are counted, not written."""
    spec = load_spec(SLOW, bus.store)
    monkeypatch.setattr(log_watch, "LOG_AWAY_S", 0.05)
    monkeypatch.setattr(log_watch, "LOG_BACK_S", 0.05)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("trialtest", environment="slow", max_ticks=30)
        await asyncio.sleep(0.2)
        with structlog.testing.capture_logs() as said:
            refused = failing_sends(bus, monkeypatch, 60)
            monkeypatch.setattr(service, "RETRY_BACKOFF_MAX_S", 0.02)
            ended = await ctl.wait_ended(tid, timeout=20)
    assert len(refused) == 60 and ended.reason == "max_ticks"
    away = [e for e in said if e["event"].startswith("the log is away")]
    back = [e for e in said if e["event"] == "the log is back: deadlines run again"]
    retries = [e for e in said if e["event"] == "publish failed; retrying"]
    # The deployment's services share one bus here, as the loops of one process do.
    assert len(away) == len(back) >= 1 and len(retries) <= 6, (len(away), len(back), len(retries))
    assert away[0]["since"].endswith("Z") and away[0]["events_waiting"] >= 1 and back[0]["away_s"] >= 0


async def test_while_the_log_is_away_response_deadlines_wait_with_it(bus, monkeypatch):
    """An outage of the log longer than the response timeout (3 s in the spec; nothing can be
    written or read for 3.5 s) ends in no timeout: the services' deadlines are measured on a
    clock that stops while the log is away, and the trial goes on as if nothing happened."""
    spec = load_spec(SLOW, bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("trialtest", environment="slow", max_ticks=40)
        await asyncio.sleep(0.3)
        began = time.monotonic()
        original = bus.send_many

        async def send_many(items, **kwargs):
            if time.monotonic() - began < 3.5:
                raise TransportError("Kafka refused a record: KafkaConnectionError (test)")
            return await original(items, **kwargs)

        monkeypatch.setattr(bus, "send_many", send_many)
        monkeypatch.setattr(service, "RETRY_BACKOFF_MAX_S", 0.05)
        # Nothing answers a fetch either, as when the brokers are gone.
        monkeypatch.setattr(
            MemoryConsumer,
            "unanswered_s",
            lambda self: outage if (outage := time.monotonic() - began) < 3.5 else 0.0,
        )
        ended = await ctl.wait_ended(tid, timeout=30)
    assert (ended.reason, ended.tick) == ("max_ticks", 40)
    timeouts = [e for e in events_of(bus, tid) if isinstance(e, ActorTimeout)]
    assert timeouts == [], f"the outage was counted against the actors: {timeouts}"


async def test_a_commit_waiting_for_a_lost_coordinator_holds_up_no_tick(bus, monkeypatch):
    """A group's coordinator lost (its broker gone, the partitions' leaders there): a commit
    waits in the Kafka client until the coordinator moves. The actors' commits wait 4.5 s here,
    longer than the spec's response timeout (3 s); the actors act meanwhile, none times out."""
    spec = load_spec(SLOW, bus.store)
    original = MemoryConsumer.commit
    held = []

    async def commit(self, offsets):
        if self.group and "actors." in self.group and time.monotonic() < release:
            held.append(self.group)
            await asyncio.sleep(release - time.monotonic())
        return await original(self, offsets)

    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("trialtest", environment="slow", max_ticks=120)
        release = time.monotonic() + 4.5
        monkeypatch.setattr(MemoryConsumer, "commit", commit)
        ended = await ctl.wait_ended(tid, timeout=30)
    assert held, "no actor's commit was held"
    assert (ended.reason, ended.tick) == ("max_ticks", 120)
    timeouts = [e for e in events_of(bus, tid) if isinstance(e, ActorTimeout)]
    assert timeouts == [], f"a commit held up the actors: {timeouts}"


async def test_the_commit_before_stopping_lands_after_the_periodic_one_under_way(bus, monkeypatch):
    """A periodic commit still waiting when the service stops (or hands its partitions back)
    lands first: the last commit's offsets, the newest, are the ones that stay."""
    spec = load_spec(SLOW, bus.store)
    original = MemoryConsumer.commit
    calls: dict[str, list[dict]] = {}
    landed = []

    async def commit(self, offsets):
        if not (self.group and "actors." in self.group):
            return await original(self, offsets)
        calls.setdefault(self.group, []).append(dict(offsets))
        if len(calls[self.group]) == 1:  # the first periodic one waits, as for a lost coordinator
            await asyncio.sleep(1.0)
        await original(self, offsets)
        landed.append(self.group)

    async with deployment(bus, spec) as (d, ctl):
        tid = await ctl.start_trial("trialtest", environment="slow", max_ticks=200)
        monkeypatch.setattr(MemoryConsumer, "commit", commit)
        while not calls:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # the trial goes on meanwhile: the stop's offsets are newer
        await d.stop()
        assert not [e for e in events_of(bus, tid) if isinstance(e, TrialEnded)], "the trial ended before the stop"
        for _ in range(40):  # every commit made has landed, the held one too
            if len(landed) == sum(map(len, calls.values())):
                break
            await asyncio.sleep(0.05)
    for group, made in calls.items():
        assert len(made) >= 2, f"{group}: no commit after the held one"
        newest = made[-1]
        assert all(newest[rp][0] >= offset for rp, (offset, _) in made[0].items() if rp in newest)
        assert {rp: bus.committed[group][rp] for rp in newest} == newest, f"{group}: an older commit landed last"


def watching(watch: log_watch.LogWatch, start: float, end: float, quiet) -> None:
    """A loop's watches every 0.2 s from ``start`` to ``end``; ``quiet(t)``: the client's quiet at t."""
    for n in range(round((end - start) / 0.2) + 1):
        watch.watch(start + 0.2 * n, quiet(start + 0.2 * n), 0)


def test_a_deadline_waits_while_the_log_may_be_going_and_the_clock_leaves_the_outage_out():
    """Before LOG_AWAY_S the loss is not known yet: no deadline falls then (not sure), so a
    response timeout shorter than LOG_AWAY_S cannot count the outage's first seconds. Once
    away, the clock stops from about the last answer; it runs again LOG_BACK_S after the log
    answers again, with the whole outage left out."""
    watch = log_watch.LogWatch("environment")
    watching(watch, 100.0, 101.0, lambda t: 0.2)
    assert watch.sure and not watch.away
    lost_at = 101.0  # the last answer; answered again from 110
    watching(watch, 101.2, 102.8, lambda t: t - lost_at)
    assert not watch.away and not watch.sure  # a broker lost a second ago, maybe
    watching(watch, 103.0, 109.8, lambda t: t - lost_at)
    assert watch.away and not watch.sure and log_watch.LogWatch.away_in_process == 1
    watching(watch, 110.0, 110.0 + log_watch.LOG_BACK_S - 0.2, lambda t: 0.1)
    assert watch.away, "back too soon: the others' records are still on their way"
    watching(watch, 110.0 + log_watch.LOG_BACK_S, 110.0 + log_watch.LOG_BACK_S, lambda t: 0.1)
    assert watch.sure and not watch.away and log_watch.LogWatch.away_in_process == 0
    # Away from the last answer (capped at 2 LOG_AWAY_S before it was known) until back.
    known_at = lost_at + log_watch.LOG_AWAY_S
    outage = 110.0 + log_watch.LOG_BACK_S - (known_at - min(known_at - lost_at, 2 * log_watch.LOG_AWAY_S))
    assert abs((time.monotonic() - watch.time()) - outage) < 1e-3
    watch.close()


def test_a_loop_that_did_not_turn_for_seconds_counts_as_the_log_away_from_its_last_watch():
    """A service loop waiting inside the Kafka client (its group's coordinator lost, a poll
    waiting for the rejoin) sees nothing of the outage, and after it every answer is fresh:
    a deadline measured on the host's clock would fall at once. The stall is left out."""
    watch = log_watch.LogWatch("environment")
    watching(watch, 100.0, 101.0, lambda t: 0.2)
    watch.watch(113.0, 0.1, 0)  # twelve seconds later, all answered again
    assert watch.away and not watch.sure
    back_at = 113.2 + log_watch.LOG_BACK_S  # answered since the first watch after the stall
    watching(watch, 113.2, back_at - 0.2, lambda t: 0.1)
    assert watch.away
    watching(watch, back_at, back_at, lambda t: 0.1)
    assert watch.sure
    assert abs((time.monotonic() - watch.time()) - (back_at - 101.0)) < 1e-3
    watch.close()


async def test_a_controller_whose_reading_fails_tells_every_waiter_rather_than_leaving_it_waiting(bus, monkeypatch):
    async with Controller(bus) as ctl:
        waiting = asyncio.create_task(ctl.wait_ended("trial-000000000001", timeout=30))
        watching = ctl.watch()
        listening = asyncio.create_task(anext(watching))
        await asyncio.sleep(0.05)

        async def refused(self, timeout_ms=100, max_records=None):
            raise TransportError("the cluster refused the fetch")

        monkeypatch.setattr(MemoryConsumer, "poll", refused)
        with pytest.raises(TrialError, match="stopped reading the log: TransportError: the cluster refused"):
            await asyncio.wait_for(waiting, 5)  # the loop's poll in flight ends within its 500 ms
        with pytest.raises(TrialError, match="stopped reading the log"):
            await asyncio.wait_for(listening, 1)
        with pytest.raises(TrialError, match="stopped reading the log"):  # and a wait begun afterwards
            await ctl.wait_started("trial-000000000002", timeout=1)
        with pytest.raises(TrialError, match="stopped reading the log"):
            await asyncio.wait_for(anext(ctl.watch()), 1)
        await watching.aclose()
