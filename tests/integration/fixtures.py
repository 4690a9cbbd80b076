"""Environments and actors that exercise the runtime's corners in integration tests."""

from __future__ import annotations

import dataclasses
import time

from trialog.actor import Agent, EndEvent, MessageEvent, ObservationEvent, Policy
from trialog.environment import Environment, MessageOut
from trialog.examples.rps.game import RockPaperScissors

# What session actors saw, by (trial, actor) — the tests run these actors in-process.
SEEN: dict[tuple[str, str], list] = {}


class SlowRps(RockPaperScissors):
    """RPS that takes a while per tick, so a test can act mid-trial."""

    def update(self, actions):
        time.sleep(float(self.trial.config.get("delay_s", 0.05)))
        return super().update(actions)


class Exploding(RockPaperScissors):
    def update(self, actions):
        if self.round >= 2:
            raise RuntimeError("boom at round 2")
        return super().update(actions)


class Silent(Agent):
    """Never answers: the response-timeout policy decides."""

    def decide(self, observation):
        raise RuntimeError("silent actor does not act")


async def rewarding_player(session) -> None:
    """Plays ROCK, rewards the other player every tick (confidence 0.5), says hello
    once, answers messages, and records every event it sees."""
    seen = SEEN.setdefault((session.trial.trial_id, session.actor.name), [])
    other = next(n for n in session.trial.actor_names if n != session.actor.name)
    async for event in session:
        seen.append(event)
        match event:
            case ObservationEvent(tick=0, final=False):
                session.message([other], {"hello": session.actor.name})
                session.act("ROCK")
            case ObservationEvent(final=False):
                session.reward(other, 2.0, confidence=0.5)
                session.act("ROCK")
            case MessageEvent(payload={"hello": sender}):
                session.message([sender], {"reply": session.actor.name})
            case EndEvent():
                break


class NoEnvironment(Environment):
    pass


class Bloated(RockPaperScissors):
    """RPS whose environment, at round ``bloat_at``, sends a message larger than the
    events topic takes (``bloat_bytes``): the trial must end with a clear error."""

    def update(self, actions):
        step = super().update(actions)
        if self.round == int(self.trial.config.get("bloat_at", 3)):
            blob = "x" * int(self.trial.config.get("bloat_bytes", 2_000_000))
            step = dataclasses.replace(
                step, messages=[MessageOut(receivers=list(self.players), payload={"blob": blob})]
            )
        return step


class SkipsTickThree(Agent):
    """Breaks the protocol on purpose (never answers tick 3): the conformance suite must say so."""

    def decide(self, observation):
        if observation["round"] == 3:
            raise RuntimeError("skipping tick 3")
        return "ROCK"


class SlowPolicy(Policy):
    """A batched implementation that takes ``delay_s`` per call whatever the batch size
    (a forward pass), plays ROCK, and records the size of every batch."""

    BATCHES: list[int] = []

    def decide_batch(self, requests):
        SlowPolicy.BATCHES.append(len(requests))
        time.sleep(float(self.config.get("delay_s", 0.2)))
        return ["ROCK"] * len(requests)


class ScaledRps(SlowRps):
    """RPS whose rewards follow a parameter changed mid-trial (``parameters.changed``)."""

    scale = 1.0

    def set_parameters(self, parameters):
        self.scale = float(parameters.get("scale", self.scale))

    def update(self, actions):
        step = super().update(actions)
        return dataclasses.replace(step, rewards={name: value * self.scale for name, value in step.rewards.items()})


def rps_with_a_seat(name: str, *, max_ticks: int) -> str:
    """A spec (YAML text) of rock-paper-scissors between a random player (alice) and a
    client seat (bob), with timeouts long enough for a person or a slow machine."""
    from pathlib import Path

    observation = Path(__file__).resolve().parents[2] / "examples" / "rps" / "observation.avsc"
    return f"""
name: {name}
actor_classes:
  player:
    observation: {observation}
    action: {{type: enum, name: rps.Move, symbols: [ROCK, PAPER, SCISSORS]}}
    default_action: ROCK
environments:
  rps: {{entry: "trialog.examples.rps.game:RockPaperScissors", config: {{target_score: 1000}}}}
actors:
  random: {{entry: "trialog.examples.rps.players:RandomPlayer"}}
  human: {{client: true}}
trial:
  environment: rps
  actors:
    - {{name: alice, class: player, implementation: random}}
    - {{name: bob, class: player, implementation: human}}
  max_ticks: {max_ticks}
  response_timeout_ms: 20000
  inactivity_timeout_ms: 60000
  join_timeout_ms: 60000
"""
