"""An actor service reads a trial's rewards only when someone there takes them: an agent's
``on_reward``, a session, or a probe asking what the actors received. Either way each
actor records each reward once, in log order, and only those that count — on the
in-memory bus; the conformance suite checks the probes' answers on Kafka
(tests/integration/test_conformance.py, whose counter players take no rewards)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from tests.conftest import wait_for
from tests.harness import deployment
from trialog.actor import RewardEvent
from trialog.bus.memory import MemoryBus
from trialog.examples.rps.players import CounterPlayer
from trialog.protocol.events import Message, Reward
from trialog.protocol.inbox import PROBE
from trialog.protocol.topics import EVENTS
from trialog.runtime import actor_runtime
from trialog.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]

SPEC = f"""
name: lazy-rewards
actor_classes:
  player:
    observation: {ROOT / "examples" / "rps" / "observation.avsc"}
    action: {{type: enum, name: rps.Move, symbols: [ROCK, PAPER, SCISSORS]}}
    default_action: ROCK
environments:
  rps: {{entry: "trialog.examples.rps.game:RockPaperScissors", config: {{target_score: 100000}}}}
actors:
  counter: {{entry: "trialog.examples.rps.players:CounterPlayer"}}
  hooked: {{entry: "tests.unit.test_actor_rewards:HookedCounter"}}
trial:
  environment: rps
  actors:
    - {{name: alice, class: player, implementation: counter}}
    - {{name: bob, class: player, implementation: hooked}}
  max_ticks: 100000
  tick_interval_ms: 20
"""

TAKEN: list[RewardEvent] = []  # what bob's on_reward was handed


class HookedCounter(CounterPlayer):
    def on_reward(self, reward: RewardEvent) -> None:
        TAKEN.append(reward)


# Judges' rewards, retroactive: a repeat, a repeat of the same (tick, sender) with another value,
# and one for a tick not observed yet (it does not count) among them.
JUDGED = [
    Reward("", tick=1, receiver="*", value=1.0, sender="j1"),
    Reward("", tick=1, receiver="*", value=1.0, sender="j1"),
    Reward("", tick=1, receiver="player.*", value=5.0, sender="j1"),
    Reward("", tick=2, receiver="*", value=2.0, sender="j2"),
    Reward("", tick=10**6, receiver="*", value=3.0, sender="j3"),
]
WANT = [[1, "j1", 1.0], [2, "j2", 2.0]]


def _host(d, implementation: str) -> actor_runtime.ActorHandler:
    return next(loop.handler for loop in d.loops if getattr(loop.handler, "implementation", None) == implementation)


def _answer(bus: MemoryBus, tid: str, actor: str) -> dict | None:
    for r in bus.records(EVENTS):
        if r.key == tid.encode() and r.header("kind") == "message" and r.header("sender") == actor:
            message = bus.codec.decode(r.value, "message")
            if message.receivers == ("conformance",):
                return orjson.loads(message.payload)
    return None


@pytest.mark.parametrize("kept", [actor_runtime.UNREAD_REWARDS_KEPT, 2])
async def test_rewards_no_actor_takes_are_read_when_a_probe_asks_as_they_would_have_been(
    memory_settings, tmp_path, monkeypatch, kept
):
    monkeypatch.setattr(actor_runtime, "UNREAD_REWARDS_KEPT", kept)
    TAKEN.clear()
    bus = MemoryBus(memory_settings)
    (tmp_path / "spec.yaml").write_text(SPEC)
    spec = load_spec(tmp_path / "spec.yaml", bus.store)
    async with deployment(bus, spec) as (d, ctl):
        tid = await ctl.start_trial("lazy-rewards")
        await wait_for(lambda: ctl.last_tick(tid) >= 3, timeout=20, what="tick 3")
        await bus.publish_all(EVENTS, [dataclasses.replace(r, trial_id=tid) for r in JUDGED])
        lazy, eager = _host(d, "counter").trials[tid], _host(d, "hooked").trials[tid]
        await wait_for(lambda: len(lazy.unread_rewards) + len(lazy.actors["alice"].received.rewards) >= 5, timeout=10)
        assert (lazy.takes_rewards, eager.takes_rewards) == (False, True)
        if kept > len(JUDGED):  # nothing read yet: alice's host has not decoded a single reward
            assert lazy.actors["alice"].received.rewards == [] and len(lazy.unread_rewards) >= len(JUDGED)
        else:  # read whenever that many wait: never more kept unread
            assert len(lazy.unread_rewards) < kept
        probes = [
            Message(
                tid, tick=0, sender="conformance", receivers=(a,), message_id=f"p-{a}", payload=f'{{"{PROBE}": "p"}}'
            )
            for a in ("alice", "bob")
        ]
        asked = (await bus.publish_all(EVENTS, probes))[0].offset
        await wait_for(lambda: _answer(bus, tid, "alice") and _answer(bus, tid, "bob"), timeout=10, what="answers")
        await ctl.terminate(tid)
        await ctl.wait_ended(tid, timeout=20)
    answers = {a: _answer(bus, tid, a)["rewards"] for a in ("alice", "bob")}
    judged = {a: [r for r in rewards if r[1].startswith("j")] for a, rewards in answers.items()}
    assert judged == {"alice": WANT, "bob": WANT}
    # The environment's rewards too, whether read as they came (bob) or when asked (alice): the
    # answers list each reward that reached the actor up to the probe, as the log holds them.
    assert [r for r in answers["alice"] if r[1] == "env"] and [r for r in answers["bob"] if r[1] == "env"]
    assert all(record.offset > asked for record, *_ in lazy.unread_rewards)  # only what came after the probe
    assert [[t.tick, t.sender, t.value] for t in TAKEN if t.sender.startswith("j")] == WANT
