"""The shipped analytics jobs as plain functions (the Kafka runs are in
tests/integration/test_analytics.py): the datalog's reward rules, revisions by late
rewards, and summaries that count each trial once whatever the delivery order."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

from trialog.protocol.events import ActorSpec, Event, Observation, Reward, TrialEnded, TrialStarted
from trialog.protocol.topics import EVENTS
from trialog.services.analytics.jobs import KINDS, contributions, fold_group, fold_trial, group_key


class State(dict):
    """Quix's State, as far as the jobs use it."""

    def get(self, key, default=None):
        return super().get(key, default)

    def set(self, key, value):
        self[key] = value


def started(tid: str, impls=("random", "counter"), client=(False, False)) -> TrialStarted:
    actors = tuple(ActorSpec(name, "player", impl, "{}", c) for name, impl, c in zip(("alice", "bob"), impls, client))
    return TrialStarted(
        tid,
        spec="rps",
        environment="rps",
        environment_entry="x:y",
        environment_config="{}",
        actors=actors,
        actor_classes=(),
        seed=1,
    )


def read_as_the_jobs_do(bus, tid: str) -> list:
    """A trial's records on the in-memory bus as the analytics service reads them: through its
    deserializer (the kinds the jobs read, tags checked), each record one event or two."""
    from quixstreams.models.serializers.exceptions import IgnoreMessage

    from trialog.analytics import EventDeserializer

    read = EventDeserializer(KINDS, bus.store, trust=bus.trust)
    out = []
    for r in bus.records(EVENTS):
        if r.trial_id == tid:
            with contextlib.suppress(IgnoreMessage):
                out += read(r.value, SimpleNamespace(headers=list(r.headers)))
    return out


def run(state: State, tid: str, events: list, t0: int = 1000) -> list:
    return [out for i, e in enumerate(events) if (out := fold_trial(e, tid, t0 + 10 * i, [], state)) is not None]


def test_returns_follow_the_datalog_rules_and_late_rewards_revise_them():
    state = State()
    outs = run(state, "t1", [
        started("t1"),
        Observation("t1", tick=0, actor="alice"), Observation("t1", tick=0, actor="bob"),
        Reward("t1", tick=0, receiver="*", value=1.0, confidence=1.0, sender="env"),
        Reward("t1", tick=0, receiver="*", value=1.0, confidence=1.0, sender="env"),  # duplicate: ignored
        Reward("t1", tick=0, receiver="alice", value=4.0, confidence=3.0, sender="judge"),  # (1*1 + 4*3) / 4
        Reward("t1", tick=0, receiver="bob", value=9.0, confidence=0.0, sender="judge"),  # no confidence: no weight
        Observation("t1", tick=1, actor="alice"),
        Reward("t1", tick=5, receiver="bob", value=7.0, sender="judge"),  # beyond the final tick
        TrialEnded("t1", tick=1, reason="environment"),
        Reward("t1", tick=1, receiver="player.*", value=2.0, sender="late"),  # after the end: a revision
    ])  # fmt: skip
    assert len(outs) == 2
    first, revised = outs
    assert first["returns"] == {"alice": pytest.approx(3.25), "bob": 1.0}
    assert revised["returns"] == {"alice": pytest.approx(5.25), "bob": 3.0}
    assert (
        revised["reward_sources"]["env"] == {"total": 1.0, "count": 1}
        and revised["reward_sources"]["late"]["count"] == 1
    )
    assert (revised["ticks"], revised["reason"], revised["pairing"], revised["tick_ms_mean"]) == (
        1,
        "environment",
        "random + counter",
        60.0,
    )


def summaries(results: list[dict], window: int = 2) -> dict:
    states: dict[str, State] = {}
    latest = {}
    for result in results:
        for item in contributions(result):
            latest[group_key(item)] = fold_group(item, states.setdefault(group_key(item), State()), window=window)
    return latest


def result(tid: str, ended_ms: int, alice: float, bob: float, human=False) -> dict:
    state = State()
    [out] = run(state, tid, [
        started(tid, client=(human, False)),
        Reward(tid, tick=0, receiver="alice", value=alice, sender="env"),
        Reward(tid, tick=0, receiver="bob", value=bob, sender="env"),
        TrialEnded(tid, tick=1, reason="environment"),
    ], t0=ended_ms - 30)  # fmt: skip
    return out


def test_summaries_count_each_trial_once_in_any_order_and_keep_its_latest_result():
    a, b, c = result("a", 1000, 1, 0), result("b", 2000, 3, 1), result("c", 3000, 5, 2, human=True)
    revised_a = {**a, "returns": {"alice": 10.0, "bob": 0.0}, "total": 10.0}
    in_order = summaries([a, b, c])
    shuffled = summaries([c, a, b, a, revised_a, b])  # duplicates, a revision, another order
    pairing = shuffled["returns-by-pairing|random + counter"]
    assert in_order["returns-by-pairing|random + counter"]["rolling_mean_by_actor"] == {
        "alice": 4.0,
        "bob": 1.5,
    }  # b and c: the last two
    assert pairing["trials"] == 3 and pairing["mean_by_actor"]["alice"] == pytest.approx(6.0)
    assert pairing["rolling_mean_by_actor"] == {"alice": 4.0, "bob": 1.5}
    assert shuffled["reward-sources|env"]["count"] == 6 and shuffled["reward-sources|env"]["trials"] == 3
    assert shuffled["human-vs-agent|rps"] == {
        "job": "human-vs-agent",
        "key": "rps",
        "trials": 1,
        "human_mean": 5.0,
        "agent_mean": 2.0,
        "human_wins": 1,
        "agent_wins": 0,
        "ties": 0,
    }


def test_the_benchmark_datalog_folds_into_the_expected_results():
    from bench.analytics import trial_events

    state = State()
    events = trial_events("bench-1", ticks=6, seed=1)
    [out] = run(state, "bench-1", deserialized(events)[0])  # the rewards carried by the observations
    # seed 1: ticks 0..5 won by bob, draw, alice, bob, draw, alice; the final observations at tick 6
    assert out["returns"] == {"alice": 0.0, "bob": 0.0} and out["ticks"] == 6 and out["reason"] == "max_ticks"
    assert out["reward_sources"]["env"]["count"] == 12 and not [e for e in events if isinstance(e, Reward)]
    [out] = run(State(), "bench-0", deserialized(trial_events("bench-0", ticks=4, seed=0))[0])
    assert out["returns"] == {"alice": 1.0, "bob": -1.0}  # alice, bob, draw, alice


# --- rewards observations carry ---------------------------------------------------------------------------


def deserialized(events: list, kinds=KINDS, headers=None) -> tuple[list, int]:
    """Events encoded as records and read back by the jobs' deserializer: (events, records skipped)."""
    from quixstreams.models.serializers.exceptions import IgnoreMessage

    from trialog.analytics import EventDeserializer
    from trialog.protocol.event_codec import EventCodec

    codec, read, out = EventCodec(), EventDeserializer(kinds), []
    for event in events:
        ctx = SimpleNamespace(headers=(headers or Event.headers)(event))
        with contextlib.suppress(IgnoreMessage):
            out += read(codec.encode(event), ctx)
    return out, read.skipped


def test_a_reward_an_observation_carries_counts_as_the_record_it_stands_for():
    """The same trial logged twice — the environment's rewards as records, then carried by the
    next observations — folds into the same result; the rewards come before their observations."""
    as_records = [started("t")]
    carried = [started("t")]
    for tick in range(4):
        values = {"alice": float(tick), "bob": -0.5 * tick}
        for actor, value in values.items():
            if tick > 0:
                as_records.append(Reward("t", tick=tick - 1, receiver=actor, value=value, sender="env"))
        for actor, value in values.items():
            as_records.append(Observation("t", tick=tick, actor=actor))
            carried.append(Observation("t", tick=tick, actor=actor, reward=value if tick > 0 else None))
    judge = Reward("t", tick=1, receiver="*", value=4.0, confidence=0.5, sender="judge")
    ended = TrialEnded("t", tick=3, reason="environment")
    as_records += [judge, ended]
    carried += [judge, ended]
    read, skipped = deserialized(carried)
    assert skipped == 0
    assert [(type(e).__name__, e.tick) for e in read[3:7]] == [
        ("Reward", 0),
        ("Observation", 1),
        ("Reward", 0),
        ("Observation", 1),
    ]
    assert read[3] == Reward("t", tick=0, receiver="alice", value=1.0, confidence=1.0, sender="env")
    [by_records], [by_carried] = run(State(), "t", deserialized(as_records)[0]), run(State(), "t", read)
    # Tick 1 also has the judge's 4 (confidence 0.5) beside the environment's reward (confidence 1).
    want = {"alice": pytest.approx(1 + (2 + 2) / 1.5 + 3), "bob": pytest.approx(-0.5 + (-1 + 2) / 1.5 - 1.5)}
    assert by_carried["returns"] == by_records["returns"] == want
    assert by_carried["reward_sources"] == by_records["reward_sources"]
    assert by_carried["reward_sources"]["env"]["count"] == 6 and by_carried["ticks"] == 3


def test_a_job_reading_rewards_alone_gets_the_carried_ones_and_no_observation():
    carrying = Observation("t", tick=2, actor="alice", reward=1.5)
    plain = Observation("t", tick=2, actor="bob")
    assert deserialized([carrying, plain], kinds={"reward"}) == ([carrying.carried_reward()], 0)
    assert deserialized([carrying, plain], kinds={"observation"}) == ([carrying, plain], 0)
    assert deserialized([carrying], kinds=None) == ([carrying.carried_reward(), carrying], 0)


def test_an_observation_whose_reward_header_lies_counts_nowhere():
    """The ``reward`` header is set exactly when the body carries a reward: a record that says
    otherwise is skipped, with its reward (its owner dead-letters it)."""
    carrying = Observation("t", tick=2, actor="alice", reward=1.5)
    plain = Observation("t", tick=2, actor="bob")

    def without_header(event):
        return [(k, v) for k, v in event.headers() if k != "reward"]

    def forged_header(event):
        return [*event.headers(), ("reward", b"1")]

    for kinds in (KINDS, {"reward"}, None):
        assert deserialized([carrying], kinds, without_header) == ([], 0 if kinds == {"reward"} else 1)
        assert deserialized([plain], kinds, forged_header) == ([], 1)
