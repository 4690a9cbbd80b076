"""Bad records on a real broker: each dead-lettered exactly once by its one owner, honest trials untouched.

The records are the leaks found when the dead-letter rules were first tried as
an attacker would (garbage under a reward kind, unknown and non-UTF-8 kinds,
actions for far ticks, invalid JSON, NaN confidences, a start whose schemas do
not parse, an undecodable record carrying only plausible headers…).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.harness import deployment
from trialog.bus.kafka import KafkaBus
from trialog.datalog.replay import read_trial, trial_records
from trialog.errors import CodecError
from trialog.protocol.events import (
    Action,
    ActorClassSpec,
    ActorSpec,
    Message,
    Observation,
    ParametersChanged,
    Reward,
    StartRequest,
    TerminateRequest,
    TrialStarted,
)
from trialog.protocol.topics import CONTROL, DEAD_LETTERS, EVENTS
from trialog.spec import load_spec

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent


async def read_letters(bus: KafkaBus, settle_s: float = 4.0) -> list[dict]:
    """Every dead letter so far; reads until nothing new came for ``settle_s``."""
    reader = bus.consumer([DEAD_LETTERS])
    await reader.start()
    letters: list[dict] = []
    try:
        quiet_since = asyncio.get_running_loop().time()
        while asyncio.get_running_loop().time() - quiet_since < settle_s:
            got = [bus.store.decode(r.value) for r in await reader.poll(timeout_ms=500)]
            if got:
                letters += got
                quiet_since = asyncio.get_running_loop().time()
    finally:
        await reader.stop()
    return letters


def record(role: str, event, *, headers=None, value=None):
    """A record carrying ``event``, tagged as its sender would (optionally with other headers, or other bytes)."""
    return (role, event, headers, value)


async def test_each_bad_record_is_dead_lettered_once_and_honest_trials_finish(kafka_settings):
    bus = KafkaBus(kafka_settings)
    spec = load_spec(HERE / "trialtest.yaml", bus.store)
    async with deployment(bus, spec) as (_, ctl):
        honest = [await ctl.start_trial("trialtest", seed=i, environment="slow", max_ticks=20) for i in range(2)]
        tid = honest[0]
        await wait_for(lambda: all(ctl.last_tick(t) >= 3 for t in honest), timeout=60, what="trials under way")
        now = ctl.last_tick(tid)
        early = now + 6  # an action and an environment reward for a tick that has not come yet
        move = bus.store.get("rps.Move")
        bad_schema = TrialStarted(
            "forged-start",
            spec="trialtest",
            environment="rps",
            environment_entry="x:y",
            environment_config="{}",
            actors=(ActorSpec("alice", "player", "random"),),
            actor_classes=(ActorClassSpec("player", "{not json", "{}"),),
            seed=1,
        )
        cases = {
            "garbage under a reward kind": record(
                EVENTS, Reward(tid, tick=1), headers=[("kind", b"reward")], value=b"\x00garbage"
            ),
            "unknown kind": record(EVENTS, Reward(tid, tick=1), headers=[("kind", b"bogus")]),
            "non-UTF-8 kind": record(
                EVENTS, Reward(tid, tick=1), headers=[*Reward(tid, tick=1).headers()[1:], ("kind", b"\xff\xfe")]
            ),
            "no headers": record(EVENTS, Reward(tid, tick=1), headers=[]),
            "action for tick 10^9": record(EVENTS, Action(tid, tick=10**9, actor="alice", payload=move.encode("ROCK"))),
            "action for tick -5": record(EVENTS, Action(tid, tick=-5, actor="alice", payload=move.encode("ROCK"))),
            "early action": record(EVENTS, Action(tid, tick=early, actor="alice", payload=move.encode("SCISSORS"))),
            "early environment reward": record(
                EVENTS, Reward(tid, tick=early, receiver="alice", value=99.0, sender="env")
            ),
            "message with invalid JSON": record(
                EVENTS, Message(tid, tick=1, sender="bob", receivers=("alice",), message_id="m1", payload="{nope")
            ),
            "parameters with invalid JSON": record(
                EVENTS, ParametersChanged(tid, tick=1, sender="ops", parameters="[1,")
            ),
            "reward for an unknown trial": record(EVENTS, Reward("no-such-trial", tick=0)),
            "action on control": record(CONTROL, Action(tid, tick=now, actor="alice", payload=move.encode("ROCK"))),
            "start with schemas that do not parse": record(EVENTS, bad_schema),
            "undecodable, plausible headers": record(
                EVENTS, Observation(tid, tick=1_000_000, actor="alice"), value=b"\x00\x01"
            ),
            "NaN confidence": record(
                EVENTS, Reward(tid, tick=1, receiver="alice", confidence=float("nan"), sender="judge")
            ),
            "infinite confidence": record(
                EVENTS, Reward(tid, tick=1, receiver="alice", confidence=float("inf"), sender="judge2")
            ),
            "negative confidence": record(
                EVENTS, Reward(tid, tick=1, receiver="alice", confidence=-1.0, sender="judge3")
            ),
            "NaN value": record(EVENTS, Reward(tid, tick=1, receiver="alice", value=float("nan"), sender="judge4")),
            "second start request for a live trial": record(CONTROL, StartRequest(tid, spec="trialtest")),
            "terminate an unknown trial": record(CONTROL, TerminateRequest("no-such-trial")),
        }
        items = []
        for role, event, headers, value in cases.values():
            _, key, encoded, tagged = bus.to_record(role, event)  # tagged with this process's keys, as a service would
            items.append((role, key, encoded if value is None else value, tagged if headers is None else headers))
        sent = dict(zip(cases, await bus.send_many(items), strict=True))
        ends = [await ctl.wait_ended(t, timeout=120) for t in honest]
        assert [(e.reason, e.tick) for e in ends] == [("max_ticks", 20)] * 2  # the forged tick 10^6 ended nothing
        letters = await read_letters(bus)
        fold = await read_trial(bus, tid)
        logged = await read_events(bus, tid)

    where = {(kafka_settings.topic(d.role), d.partition, d.offset): name for name, d in sent.items()}
    lettered = [
        where.get((letter["topic"], letter["partition"], letter["offset"]), f"honest record? {letter['reason']}")
        for letter in letters
    ]
    assert sorted(lettered) == sorted(cases), "\n".join(
        f"{letter['service']}: {letter['reason']}" for letter in letters
    )
    reasons = {where[(letter["topic"], letter["partition"], letter["offset"])]: letter["reason"] for letter in letters}
    assert "confidence nan" in reasons["NaN confidence"]
    assert "finite" in reasons["NaN value"] and "between 0 and the current one" in reasons["early environment reward"]

    # The datalog keeps what the environment applied: the answer to the observation, not what came early.
    sample = next(s for s in fold.samples() if s.tick == early and s.actor == "alice")
    assert all(r.value != 99.0 for r in sample.reward_sources)
    assert sample.action_avro == applied_action(logged, early, "alice")


async def read_events(bus: KafkaBus, trial_id: str) -> list:
    """The trial's decodable events in log order (the bad records sent here are skipped)."""
    out = []
    async for r in trial_records(bus, trial_id):
        try:
            out.append(bus.codec.decode(r.value, r.header("kind")))
        except CodecError:
            pass
    return out


def applied_action(events, tick: int, actor: str) -> bytes:
    """The payload of the actor's first action for ``tick`` logged after its observation of it."""
    seen = False
    for e in events:
        seen = seen or (isinstance(e, Observation) and (e.tick, e.actor) == (tick, actor))
        if seen and isinstance(e, Action) and (e.tick, e.actor) == (tick, actor):
            return e.payload
    raise AssertionError(f"no action of {actor} answers its observation of tick {tick}")
