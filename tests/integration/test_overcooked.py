"""CoGrid's Overcooked hosted through the PettingZoo adapter, on a real broker."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import orjson
import pytest

from tests.conftest import wait_for
from tests.harness import deployment
from tests.integration.test_trials import read_trial
from trialog.bus.kafka import KafkaBus
from trialog.protocol.events import Action, Observation, Reward, TrialStarted, with_carried_rewards
from trialog.protocol.rewards import aggregate
from trialog.protocol.trial import class_schemas
from trialog.spec import load_spec

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def decoded(bus: KafkaBus, events: list) -> tuple[dict, dict, dict]:
    """Observations and actions by (tick, actor), decoded with the logged schemas; rewards by (tick, receiver)."""
    started = next(e for e in events if isinstance(e, TrialStarted))
    schemas = class_schemas(bus.store, started)
    classes = {a.name: a.actor_class for a in started.actors}
    obs, acts, rewards = {}, {}, defaultdict(list)
    for e in with_carried_rewards(events):
        if isinstance(e, Observation):
            obs[(e.tick, e.actor)] = bus.store.decode(e.payload, schemas[classes[e.actor]].observation)
        elif isinstance(e, Action):
            acts[(e.tick, e.actor)] = bus.store.decode(e.payload, schemas[classes[e.actor]].action)
        elif isinstance(e, Reward):
            rewards[(e.tick, e.receiver)].append(e)
    return obs, acts, rewards


async def test_logged_trial_equals_cogrid_stepped_in_process(kafka_settings):
    import cogrid.envs.registry as registry

    bus = KafkaBus(kafka_settings)
    spec = load_spec(ROOT / "examples" / "overcooked" / "spec.yaml", bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("overcooked", seed=17, max_ticks=60, implementations={"cook_b": "random"})
        end = await ctl.wait_ended(tid, timeout=120)
        events = await read_trial(bus, tid)
    assert end.reason == "max_ticks" and end.tick == 60
    obs, acts, rewards = decoded(bus, events)

    env = registry.make("Overcooked-CrampedRoom-V0")
    expected_obs, _ = env.reset(seed=17)
    agents = {"cook_a": env.possible_agents[0], "cook_b": env.possible_agents[1]}
    returns = defaultdict(float)
    for tick in range(60):
        for actor, agent in agents.items():
            assert np.array_equal(obs[(tick, actor)], np.asarray(expected_obs[agent])), (
                f"observation of {actor} differs at tick {tick}"
            )
        expected_obs, env_rewards, _, _, _ = env.step(
            {agent: int(acts[(tick, actor)]) for actor, agent in agents.items()}
        )
        for actor, agent in agents.items():
            logged = aggregate(rewards.get((tick, actor), []))
            assert logged == pytest.approx(float(env_rewards[agent])), f"reward of {actor} differs at tick {tick}"
            returns[actor] += logged
    for actor, agent in agents.items():
        assert np.array_equal(obs[(60, actor)], np.asarray(expected_obs[agent]))


async def test_modular_rewards_are_logged_by_source_and_coefficients_change_at_a_logged_tick(kafka_settings):
    bus = KafkaBus(kafka_settings)
    spec = load_spec(Path(__file__).parent / "overcooked_modular.yaml", bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("overcooked-modular", seed=3, max_ticks=200)
        await wait_for(lambda: ctl.last_tick(tid) >= 50, timeout=120, what="tick 50")
        # A tick the environment has not reached when it reads the change (a past one would take
        # effect at its next update instead): 5 ticks ahead was passed now and then on a fast machine.
        change_at = ctl.last_tick(tid) + 40
        await ctl.change_parameters(tid, {"reward_coefficients": {"overcooked.onion_in_pot": 0.0}}, tick=change_at)
        end = await ctl.wait_ended(tid, timeout=120)
        events = await read_trial(bus, tid)
    assert end.reason == "max_ticks"
    _, _, rewards = decoded(bus, events)
    by_sender = defaultdict(list)
    for items in rewards.values():
        for r in items:
            by_sender[r.sender].append(r)
    # Both components are their own sources in the log (confidence 0: outside the mean).
    assert {"env/total", "env/overcooked.delivery", "env/overcooked.onion_in_pot"} <= set(by_sender)
    assert all(
        r.confidence == 0 for s in ("env/overcooked.delivery", "env/overcooked.onion_in_pot") for r in by_sender[s]
    )
    # Actors receive the sum: per (tick, actor), the aggregated reward equals the components' sum.
    for (tick, actor), items in rewards.items():
        components = sum(
            r.value for r in items if r.sender in ("env/overcooked.delivery", "env/overcooked.onion_in_pot")
        )
        assert aggregate(items) == pytest.approx(components), (tick, actor)
    # The coefficient change took effect at the logged tick: the raw onion-in-pot events are
    # still logged, weighted 3 before it and 0 from it on.
    onion = by_sender["env/overcooked.onion_in_pot"]
    before = [r for r in onion if r.tick < change_at]
    after = [r for r in onion if r.tick >= change_at]
    assert before and after, (change_at, sorted({r.tick for r in onion}))
    assert all(orjson.loads(r.user_data)["coefficient"] == 3 and r.value != 0 for r in before)
    assert all(orjson.loads(r.user_data)["coefficient"] == 0 and r.value == 0 for r in after)
    assert any(r.tick >= change_at for r in by_sender["env/overcooked.delivery"]), (
        "the planners keep delivering after the change"
    )
