"""The rewards a seat is shown, on the in-memory bus: the environment's reward an observation
carries (``Observation.reward``) reaches a seat's page, a watcher and a seat played from code
(:func:`trialog.client_actor.join`) as the reward record it stands for, just before the
observation — what the datalog counts, in the log's order."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from tests.gateway.kit import gateway, seat_url, socket
from tests.harness import deployment
from tests.unit.test_what_counts import SEAT_SPEC
from trialog.actor import EndEvent, ObservationEvent, RewardEvent
from trialog.bus.base import Record
from trialog.bus.memory import MemoryBus
from trialog.client_actor import join
from trialog.controller import join_link
from trialog.datalog.replay import read_trial
from trialog.protocol.events import (
    HEADER_KIND,
    HEADER_RECEIVER,
    HEADER_REWARD,
    HEADER_SENDER,
    Observation,
    Reward,
    as_logged,
)
from trialog.protocol.topics import EVENTS
from trialog.services.gateway.sockets import _others
from trialog.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]


def env_rewards(fold, actor: str | None = None) -> list[tuple[int, str, float]]:
    """(tick, receiver, value) of the environment's rewards the datalog counts, by tick."""
    return sorted(
        (s.tick, s.actor, r.value)
        for s in fold.samples()
        for r in s.reward_sources
        if r.sender == "env" and (actor is None or s.actor == actor)
    )


def test_a_carried_reward_is_shown_as_its_record_just_before_its_observation():
    carrying = Observation("t", tick=3, actor="bob", payload=b"", reward=-1.0)
    reward, observation = as_logged(carrying)
    assert reward == Reward("t", tick=2, receiver="bob", value=-1.0, confidence=1.0, sender="env", user_data=None)
    assert observation is carrying
    plain = Observation("t", tick=3, actor="bob", payload=b"")
    assert as_logged(plain) == (plain,) and as_logged(reward) == (reward,)


async def test_a_seat_and_a_watcher_see_the_rewards_observations_carry(memory_settings):
    """A person's seat and a watcher see each reward the environment's observations carry, in the
    log's order; an observation that counts nowhere (its reward header and body disagree, or it
    does not decode) is shown to neither, nor the reward it would carry."""
    bus = MemoryBus(memory_settings)
    spec = load_spec(ROOT / "examples" / "rps" / "spec.yaml", bus.store)
    async with deployment(bus, spec) as (_, ctl), gateway(bus, [spec]) as base:
        tid = await ctl.start_trial("rps", implementations={"bob": "human"}, max_ticks=5, seed=3)
        shown = []
        async with socket(seat_url(join_link(base, bus.trust.keyring, tid, "bob"))) as seat:
            while (msg := await seat.next("observation", "reward", "end"))["type"] != "end":
                shown.append(msg)
                if msg["type"] == "observation" and msg["tick"] == 0:  # none of these may reach a page
                    await bus.send_many(observations_that_cannot_count(bus, tid))
                if msg["type"] == "observation" and not msg["final"]:
                    await seat.send({"type": "action", "tick": msg["tick"], "action": "PAPER"})
        await ctl.wait_ended(tid, timeout=20)
        async with socket(f"{base}/ws/watch/{tid}") as watch:
            watched = []
            while (msg := await watch.next("observation", "reward", "end"))["type"] != "end":
                watched.append(msg)
    records = [r for r in bus.records(EVENTS) if r.trial_id == tid]
    assert [r for r in records if r.header(HEADER_KIND) == Observation.KIND and r.header(HEADER_REWARD) == "1"]
    fold = await read_trial(bus, tid)
    assert len(env_rewards(fold, "bob")) == 5
    # The seat: each of bob's rewards just before the observation that carried it, from env, confidence 1.
    seat_rewards = [(m["tick"], m["receiver"], m["value"]) for m in shown if m["type"] == "reward"]
    assert seat_rewards == env_rewards(fold, "bob")
    for i, msg in enumerate(shown):
        if msg["type"] == "observation" and msg["tick"] > 0:
            before = shown[i - 1]
            assert (before["type"], before["tick"], before["sender"], before["confidence"]) == (
                "reward",
                msg["tick"] - 1,
                "env",
                1.0,
            ), shown
    # The watcher: every actor's, each before its actor's observation of the next tick.
    assert sorted((m["tick"], m["receiver"], m["value"]) for m in watched if m["type"] == "reward") == env_rewards(fold)
    for i, msg in enumerate(watched):
        if msg["type"] == "reward":
            after = watched[i + 1]
            assert (after["type"], after["tick"], after["actor"]) == ("observation", msg["tick"] + 1, msg["receiver"])


@pytest.mark.parametrize("receiver", ["alice", "bob"])
def test_a_seat_leaves_out_another_actors_observation_and_the_reward_it_carries(receiver):
    headers = ((HEADER_KIND, b"observation"), (HEADER_SENDER, b"env"), (HEADER_RECEIVER, receiver.encode()))
    carrying = Record(EVENTS, 0, 0, b"t", b"", (*headers, (HEADER_REWARD, b"1")), 0)
    assert _others(carrying, "bob") == (receiver != "bob")  # alice's reward never reaches bob's seat


# --- a seat played from code ---------------------------------------------------------------------------------


def observations_that_cannot_count(bus, tid: str) -> list[tuple]:
    """Bob's observations of tick 1, tagged with the environment's key as a genuine one is, that
    count nowhere: one carrying a reward that is no number, one whose ``reward`` header says it
    carries one when it does not, one carrying a reward without the header."""
    first = next(r for r in bus.records(EVENTS) if r.trial_id == tid and r.header("receiver") == "bob")
    payload = bus.codec.decode(first.value, "observation").payload  # of tick 0
    nan = Observation(tid, tick=1, actor="bob", payload=payload, reward=math.nan)
    claims = Observation(tid, tick=1, actor="bob", payload=payload)
    hides = Observation(tid, tick=1, actor="bob", payload=payload, reward=7.0)
    made = []
    for obs, headers in (
        (nan, nan.headers()),
        (claims, [*claims.headers(), ("reward", b"1")]),
        (hides, [(k, v) for k, v in hides.headers() if k != "reward"]),
    ):
        value = bus.codec.encode(obs)
        made.append((EVENTS, tid.encode(), value, [*headers, *bus.trust.tag(tid, headers, value)]))
    return made


async def test_a_seat_played_from_code_takes_the_rewards_observations_carry(memory_settings, tmp_path):
    """The same without the gateway (trialog.client_actor): each reward an observation carries
    reaches the session as the record it stands for, just before the observation; an observation
    that cannot count is skipped, with what it would carry, and the session goes on."""
    bus = MemoryBus(memory_settings)
    (tmp_path / "seat.yaml").write_text(SEAT_SPEC)
    spec = load_spec(tmp_path / "seat.yaml", bus.store)
    got: list = []
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("seat")
        async with asyncio.timeout(30), join(bus, tid, "bob", holder="bob-1", timeout=20) as session:
            async for event in session:  # (a reader that stopped at a bad record would leave the seat waiting)
                got.append(event)
                match event:
                    case ObservationEvent(final=False, tick=0):
                        await bus.send_many(observations_that_cannot_count(bus, tid))
                        session.act("PAPER")
                    case ObservationEvent(final=False):
                        session.act("PAPER")
                    case EndEvent():
                        break
        await ctl.wait_ended(tid, timeout=20)
    fold = await read_trial(bus, tid)
    bob = [s for s in fold.samples() if s.actor == "bob"]
    env = sorted((s.tick, r.value) for s in bob for r in s.reward_sources if r.sender == "env")
    assert [(e.tick, e.value, e.sender, e.confidence) for e in got if isinstance(e, RewardEvent)] == [
        (tick, value, "env", 1.0) for tick, value in env
    ] and len(env) == 6
    order = [(type(e).__name__, e.tick) for e in got if not isinstance(e, EndEvent)]
    assert order == [("ObservationEvent", 0)] + [
        x for t in range(1, 7) for x in (("RewardEvent", t - 1), ("ObservationEvent", t))
    ], order
    carried = [r for r in bus.records(EVENTS) if r.trial_id == tid and r.header("reward") == "1"]
    assert len(carried) >= 12  # both actors' six rewards rode on their observations
