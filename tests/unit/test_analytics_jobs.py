"""The shipped analytics jobs as plain functions (the Kafka runs are in
tests/integration/test_analytics.py): the datalog's reward rules, revisions by late
rewards, and summaries that count each trial once whatever the delivery order."""

from __future__ import annotations

import pytest

from trialog.protocol.events import ActorSpec, Observation, Reward, TrialEnded, TrialStarted
from trialog.services.analytics.jobs import contributions, fold_group, fold_trial, group_key


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
    [out] = run(state, "bench-1", trial_events("bench-1", ticks=6, seed=1))
    # seed 1: ticks 0..5 won by bob, draw, alice, bob, draw, alice
    assert out["returns"] == {"alice": 0.0, "bob": 0.0} and out["ticks"] == 5 and out["reason"] == "max_ticks"
    [out] = run(State(), "bench-0", trial_events("bench-0", ticks=4, seed=0))
    assert out["returns"] == {"alice": 1.0, "bob": -1.0}  # alice, bob, draw, alice
