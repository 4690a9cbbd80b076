"""A two-player game written from scratch with Gymnasium spaces and no .avsc
(examples/first_env) plays real trials on Kafka: the orchestrator, the environment and the
actor services use the schemas derived from its spaces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.harness import deployment
from tests.integration.test_trials import read_trial
from trialog.bus.kafka import KafkaBus
from trialog.protocol.events import Action, Observation, Reward, with_carried_rewards
from trialog.spec import load_spec

pytestmark = pytest.mark.integration
SPEC = Path(__file__).resolve().parents[2] / "examples" / "first_env" / "spec.yaml"


async def test_guess_the_number_plays_on_kafka_with_schemas_from_its_spaces(kafka_settings):
    bus = KafkaBus(kafka_settings)
    spec = load_spec(SPEC, bus.store)
    observation_schema = bus.store.register(spec.actor_classes["guesser"].observation_schema)
    action_schema = bus.store.register(spec.actor_classes["guesser"].action_schema)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("first_env", seed=11)
        end = await ctl.wait_ended(tid, timeout=60)
        events = await read_trial(bus, tid)
    # Bisect finds any number from 1 to 100 in at most 7 guesses: the game ends it, not max_ticks.
    assert end.reason == "environment" and 1 <= end.tick <= 7, end
    guesses = [(a.tick, a.actor, bus.store.decode(a.payload, action_schema)) for a in events if isinstance(a, Action)]
    assert {actor for _, actor, _ in guesses} == {"alice", "bob"}
    assert all(1 <= guess <= 100 for _, _, guess in guesses)  # the random actor sampled the derived space
    alice = [
        bus.store.decode(o.payload, observation_schema)
        for o in events
        if isinstance(o, Observation) and o.actor == "alice"
    ]
    assert alice[0]["hint"] == 0 and alice[0]["bounds"].tolist() == [1, 100]
    assert alice[0]["bounds"].dtype == np.int64
    assert alice[-1]["hint"] == 3  # found
    rewards = [r for r in with_carried_rewards(events) if isinstance(r, Reward)]
    assert "alice" in {r.receiver for r in rewards} and all(r.value == 1.0 for r in rewards)
