"""CoGrid's Overcooked on JAX, stepped in batches (trialog/adapters/cogrid_jax.py): a trial
stepped in batches of any make-up gets, byte for byte once encoded, what it gets stepped
alone; a trial with an invalid action fails alone; the schemas are the PettingZoo adapter's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trialog.adapters.cogrid_jax import BATCH_SIZES, CoGridJaxEnvironment, padded_size
from trialog.bus.memory import MemoryBus
from trialog.environment import ActorInfo, TrialInfo, update_together
from trialog.errors import SpecError
from trialog.examples.overcooked.cooks import OvercookedPlanner
from trialog.settings import Settings
from trialog.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
CONFIG = {
    "env": "cogrid.envs.registry:make",
    "kwargs": {"environment_id": "Overcooked-CrampedRoom-V0"},
    "name": "overcooked",
    "view": "overcooked",
}
ACTORS = (ActorInfo("cook_a", "cook", "planner"), ActorInfo("cook_b", "cook", "planner"))


@pytest.fixture(scope="module", autouse=True)
def jax_backend():
    """CoGrid's backend is one per process: JAX for this module, back to unset after it, so
    that the numpy tests of other modules get numpy."""
    from cogrid.backend import set_backend
    from cogrid.backend._dispatch import _reset_backend_for_testing

    _reset_backend_for_testing()
    set_backend("jax")
    yield
    _reset_backend_for_testing()


def trial(seed: int) -> CoGridJaxEnvironment:
    return CoGridJaxEnvironment(TrialInfo(f"t{seed}", seed, CONFIG, ACTORS))


@pytest.fixture(scope="module")
def schema():
    bus = MemoryBus(Settings.load({}, environ={}))
    spec = load_spec(ROOT / "examples" / "overcooked" / "jax.yaml", bus.store)
    return bus.store.register(__import__("json").loads(spec.actor_classes["cook"].observation_schema))


def test_padded_sizes():
    assert [padded_size(n) for n in (1, 2, 4, 5, 16, 17, 64, 65, 300)] == [1, 4, 4, 16, 16, 64, 64, 256, 256]
    assert BATCH_SIZES == tuple(sorted(BATCH_SIZES))


def test_a_trial_in_batches_of_any_make_up_logs_what_it_logs_alone(schema):
    """Six trials started at different ticks, planners on both cooks; each tick a random
    subset of them goes in one batch (so a batch mixes trials at different ticks, padded),
    their twins step alone. Every observation and reward must be the same, and the
    encoded observations byte-equal."""
    seeds = [3, 4, 5, 6, 7, 8]
    batched = {s: trial(s) for s in seeds}
    alone = {s: trial(s) for s in seeds}
    planners = {s: {a.name: OvercookedPlanner(batched[s].trial, a) for a in ACTORS} for s in seeds}
    last = {}
    for s in seeds:
        first = batched[s].start()
        assert all(np.array_equal(first[a], alone[s].start()[a]) for a in first)
        last[s] = first
    rng = np.random.default_rng(0)
    rewards = 0.0
    sizes = set()
    for _ in range(90):
        chosen = [s for s in seeds if rng.random() < 0.6] or [seeds[0]]
        actions = {s: {a: planners[s][a].decide(last[s][a]) for a in last[s]} for s in chosen}
        steps = CoGridJaxEnvironment.update_batch([batched[s] for s in chosen], [actions[s] for s in chosen])
        sizes.add(padded_size(len(chosen)))
        for s, step in zip(chosen, steps):
            twin = alone[s].update(actions[s])
            assert step.rewards == twin.rewards and step.terminated == twin.terminated and step.done == twin.done
            for a in step.observations:
                assert schema.encode(step.observations[a]) == schema.encode(twin.observations[a]), (s, a)
            assert batched[s].view() == alone[s].view()
            rewards += sum(step.rewards.values())
            last[s] = step.observations
    assert rewards > 0, "no soup delivered: rewards were never compared"
    assert len(sizes) >= 2, sizes


def test_seeds_give_their_own_trials():
    a, b, again = trial(1), trial(2), trial(1)
    obs = [e.start() for e in (a, b, again)]
    moves = {"cook_a": 3, "cook_b": 2}
    for _ in range(5):
        obs = [s.observations for s in CoGridJaxEnvironment.update_batch([a, b, again], [moves] * 3)]
    assert all(np.array_equal(obs[0][x], obs[2][x]) for x in obs[0]) and np.array_equal(a.vector, again.vector)
    assert not np.array_equal(a.vector[:2], b.vector[:2])  # each trial's key stream comes from its own seed


def test_an_invalid_action_fails_its_trial_alone_and_the_batch_changes_nothing():
    envs = [trial(s) for s in (11, 12, 13)]
    for e in envs:
        e.start()
    before = [e.vector.copy() for e in envs]
    actions = [{"cook_a": 1, "cook_b": 2}, {"cook_a": 9, "cook_b": 2}, {"cook_a": 0, "cook_b": 4}]
    with pytest.raises(Exception, match="outside its action space"):
        CoGridJaxEnvironment.update_batch(envs, actions)
    for e, vector in zip(envs, before):
        assert np.array_equal(e.vector, vector)
    results, failed = update_together(CoGridJaxEnvironment, envs, actions)
    assert "outside its action space" in failed
    assert [step is None for step, _ in results] == [False, True, False]
    assert results[0][1] == results[2][1] == "" and "Discrete(7)" in results[1][1]


def test_schemas_are_the_pettingzoo_adapters():
    bus = MemoryBus(Settings.load({}, environ={}))
    jax_spec = load_spec(ROOT / "examples" / "overcooked" / "jax.yaml", bus.store)
    numpy_spec = load_spec(ROOT / "examples" / "overcooked" / "spec.yaml", bus.store)
    assert jax_spec.actor_classes["cook"] == numpy_spec.actor_classes["cook"]


def test_modular_rewards_are_refused():
    with pytest.raises(SpecError, match="PettingZoo adapter"):
        CoGridJaxEnvironment.describe({**CONFIG, "rewards": [{"component": "env"}]}, "cook")


def test_the_environment_service_prepares_the_jax_step_before_it_joins_its_group(monkeypatch):
    """The service calls prepare with the spec's config before any loop joins: the reset and the
    smallest batch size are compiled then, so the first trials do not wait for them."""
    from trialog.adapters.cogrid_jax import WARM_SIZES, _Core, _parse
    from trialog.services.environment.main import loops_for, prepare

    monkeypatch.setattr(_Core, "_cores", {})  # none compiled by the tests before this one
    bus = MemoryBus(Settings.load({}, environ={}))
    spec = load_spec(ROOT / "examples" / "overcooked" / "jax.yaml", bus.store)
    loops = loops_for(bus, spec)
    assert loops and all(loop.consumer is None for loop in loops)  # not started: no group joined yet
    prepare(loops, spec)
    (name,) = [n for n, impl in spec.environments.items() if "cogrid_jax" in impl.entry]
    core = _Core.of(_parse(spec.operator_config(name)))
    assert WARM_SIZES[0] in core.compiled
