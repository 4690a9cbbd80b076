"""Modular rewards: components are summed for the actors, every component stays
in the log as its own source, and coefficients change at a tick through
``set_parameters``."""

from __future__ import annotations

import numpy as np
import pytest

from trialog.adapters.pettingzoo import PettingZooEnvironment
from trialog.environment import ActorInfo, RewardOut, TrialInfo
from trialog.errors import SpecError, TrialError
from trialog.examples.overcooked.cooks import OvercookedPlanner
from trialog.rewards import (
    TOTAL,
    RewardComponent,
    RewardSet,
    component_from_config,
)

RPS = {"env": "pettingzoo.classic.rps_v2:parallel_env", "kwargs": {"max_cycles": 20}}
CAST = (ActorInfo("alice", "player", "test"), ActorInfo("bob", "player", "test"))


class Rock(RewardComponent):
    """1 to every actor that played rock (action 0)."""

    name = "rock"

    def compute(self, prev_state, actions, state):
        return np.asarray([a == 0 for a in actions], dtype=np.float32)


def aggregate(rewards: list[RewardOut], actor: str) -> float:
    """I-4: the confidence-weighted mean over every source, as readers compute it."""
    mine = [(r.value, r.confidence) for r in rewards if r.receiver == actor and r.confidence > 0]
    weight = sum(c for _, c in mine)
    return sum(v * c for v, c in mine) / weight if weight else 0.0


def rps(components: list[dict], **extra) -> PettingZooEnvironment:
    env = PettingZooEnvironment(TrialInfo("t", 0, {**RPS, "rewards": components}, CAST, **extra))
    env.start()
    return env


TWO = [{"component": "env", "coefficient": 1.0}, {"component": f"{__name__}:Rock", "coefficient": 2.0}]


def test_two_components_are_both_logged_and_their_sum_is_what_actors_get():
    env = rps(TWO)
    step = env.update({"alice": 0, "bob": 2})  # rock beats scissors: env +1/-1; alice played rock
    by = {(r.receiver, r.source): r for r in step.rewards}
    assert set(by) == {("alice", TOTAL), ("alice", "env"), ("alice", "rock"), ("bob", TOTAL), ("bob", "env")}
    assert by["alice", "env"].value == 1.0 and by["alice", "rock"].value == 2.0
    assert by["alice", "rock"].user_data == {"raw": 1.0, "coefficient": 2.0}
    assert by["alice", TOTAL].value == 3.0 and by["bob", TOTAL].value == -1.0
    # Components carry confidence 0: in the log, out of the mean; the total is the reward.
    assert {r.confidence for r in step.rewards if r.source != TOTAL} == {0.0}
    assert aggregate(step.rewards, "alice") == 3.0 and aggregate(step.rewards, "bob") == -1.0


def test_a_tick_without_reward_writes_nothing():
    env = rps(TWO)
    assert env.update({"alice": 1, "bob": 1}).rewards == []  # a draw, nobody played rock


def test_a_coefficient_change_takes_effect_from_the_next_update():
    env = rps(TWO)
    before = env.update({"alice": 0, "bob": 0})  # a draw: only "rock" pays, 2 each
    assert aggregate(before.rewards, "alice") == 2.0
    env.set_parameters({"reward_coefficients": {"rock": 0.5}})
    after = env.update({"alice": 0, "bob": 0})
    assert aggregate(after.rewards, "alice") == 0.5
    assert next(r for r in after.rewards if r.source == "rock").user_data == {"raw": 1.0, "coefficient": 0.5}
    with pytest.raises(TrialError, match="unknown components"):
        env.set_parameters({"reward_coefficients": {"paper": 1.0}})


def test_coefficients_in_the_trial_parameters_apply_from_the_start():
    env = rps(TWO, parameters={"reward_coefficients": {"env": 10.0}})
    step = env.update({"alice": 1, "bob": 0})  # paper beats rock
    assert aggregate(step.rewards, "alice") == 10.0 and aggregate(step.rewards, "bob") == -10.0 + 2.0


def test_a_common_component_gives_its_sum_to_everyone():
    env = rps([{"component": f"{__name__}:Rock", "common": True}])
    step = env.update({"alice": 0, "bob": 0})
    assert aggregate(step.rewards, "alice") == 2.0 and aggregate(step.rewards, "bob") == 2.0


def test_cogrid_overcooked_components_add_up_to_the_env_reward():
    """Overcooked's own reward is delivery 20 + onion in pot 3 + soup in dish 5, all
    shared; the same three as Trialog components must give the same total, tick
    by tick, while each stays a separate source."""
    base = {
        "env": "cogrid.envs.registry:make",
        "kwargs": {"environment_id": "Overcooked-CrampedRoom-V0"},
        "name": "overcooked",
    }
    modular = {**base, "rewards": [
        {"component": "overcooked.delivery", "coefficient": 20, "common": True},
        {"component": "overcooked.onion_in_pot", "coefficient": 3, "common": True},
        {"component": "overcooked.soup_in_dish", "coefficient": 5, "common": True},
    ]}  # fmt: skip
    cast = (ActorInfo("a", "cook", "planner"), ActorInfo("b", "cook", "planner"))
    plain, split = (PettingZooEnvironment(TrialInfo("t", 0, c, cast)) for c in (base, modular))
    cooks = {a.name: OvercookedPlanner(TrialInfo("t", 0, base, cast), a) for a in cast}
    observations = plain.start()
    split.start()
    sources = set()
    for _ in range(100):
        actions = {name: cooks[name].decide(obs) for name, obs in observations.items()}
        expected, got = plain.update(actions), split.update(actions)
        for name in ("a", "b"):
            assert aggregate(got.rewards, name) == pytest.approx(expected.rewards[name])
        sources |= {r.source for r in got.rewards}
        observations = expected.observations
    assert sources == {TOTAL, "overcooked.delivery", "overcooked.onion_in_pot", "overcooked.soup_in_dish"}


def test_config_errors_name_the_problem():
    with pytest.raises(SpecError, match="unknown reward component 'tidy'"):
        component_from_config({"component": "tidy"})
    with pytest.raises(SpecError, match="unknown keys"):
        component_from_config({"component": "env", "weight": 2})
    with pytest.raises(SpecError, match="neither"):
        component_from_config({"component": "numpy:ndarray"})
    with pytest.raises(SpecError, match="unique"):
        RewardSet.from_config([{"component": "env"}, {"component": "env"}], ["a"])
    with pytest.raises(SpecError, match="'total'"):
        RewardSet.from_config([{"component": "env", "name": "total"}], ["a"])
    env = PettingZooEnvironment(TrialInfo("t", 0, RPS, CAST))
    with pytest.raises(TrialError, match="lists no `rewards`"):
        env.set_parameters({"reward_coefficients": {"env": 1.0}})
