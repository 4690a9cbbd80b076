"""The scripted Overcooked cook delivers soups; random cooks do not. Played
in-process through the PettingZoo adapter, the way the runtimes will (no Kafka).
Also the random actor: valid, mask-aware, and deterministic per seed and name."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trialog.adapters.pettingzoo import PettingZooEnvironment
from trialog.agents.random_agent import RandomAgent
from trialog.environment import ActorInfo, TrialInfo
from trialog.errors import TrialogError
from trialog.examples.overcooked.cooks import Kitchen, OvercookedPlanner

OVERCOOKED = {
    "env": "cogrid.envs.registry:make",
    "kwargs": {"environment_id": "Overcooked-CrampedRoom-V0"},
    "name": "overcooked",
}
DELIVERY = 20.0  # what CrampedRoom pays each cook for a served soup (plus 3 per onion in the pot, 5 per soup in a dish)
EPISODES, TICKS = 20, 100
ACTION_SCHEMA = json.loads(
    json.dumps(PettingZooEnvironment.describe(OVERCOOKED, "cook")["action"])
)  # as the runtime hands it over


def cook(cls: type, trial: TrialInfo, actor: ActorInfo):
    agent = cls(trial, actor)
    agent.action_schema = ACTION_SCHEMA
    return agent


def episode(cls: type, seed: int, ticks: int = TICKS) -> tuple[float, int]:
    """One pair of ``cls`` cooks; returns (the first cook's return, soups delivered)."""
    cast = (ActorInfo("a", "cook", cls.__name__), ActorInfo("b", "cook", cls.__name__))
    trial = TrialInfo(f"{cls.__name__}-{seed}", seed, OVERCOOKED, cast)
    env = PettingZooEnvironment(trial)
    cooks = {a.name: cook(cls, trial, a) for a in cast}
    observations = env.start()
    total, soups = 0.0, 0
    for _ in range(ticks):
        step = env.update({name: cooks[name].decide(obs) for name, obs in observations.items()})
        total += step.rewards["a"]
        soups += step.rewards["a"] >= DELIVERY
        observations = step.observations
    env.end()
    return total, soups


def test_two_planners_score_clearly_more_than_two_random_cooks():
    planned = [episode(OvercookedPlanner, seed) for seed in range(EPISODES)]
    random = [episode(RandomAgent, seed) for seed in range(EPISODES)]
    planned_return = sum(r for r, _ in planned) / EPISODES
    random_return = sum(r for r, _ in random) / EPISODES
    assert all(soups >= 1 for _, soups in planned), planned  # every planned episode serves a soup within 100 ticks
    assert sum(soups for _, soups in random) == 0
    assert planned_return > 5 * max(random_return, 1.0), (planned_return, random_return)


def test_the_planner_is_deterministic_given_seed_and_name():
    assert episode(OvercookedPlanner, 5, ticks=60) == episode(OvercookedPlanner, 5, ticks=60)


def test_the_kitchen_is_read_right_off_the_observation():
    from cogrid.envs import registry

    env = registry.make("Overcooked-CrampedRoom-V0")
    observations, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(60):
        state = env._env_state
        for agent in (0, 1):
            k = Kitchen.parse(observations[agent])
            assert k.me == tuple(int(v) for v in state.agent_pos[agent])
            other = 1 - agent
            assert k.partners[0][0] == tuple(int(v) for v in state.agent_pos[other])
            held = int(state.agent_inv[agent, 0])
            assert (k.holding is None) == (held < 0)
            [pot] = k.pots
            assert pot.cell == (0, 2) and pot.onions == int(
                (np.asarray(state.extra_state["overcooked.pot_contents"]) > 0).sum()
            )
        assert k.cells("delivery_zone") == {(3, 3)} and k.cells("onion_stack") == {(1, 0), (1, 4)}
        observations, *_ = env.step({0: int(rng.integers(7)), 1: int(rng.integers(7))})


def test_the_planner_refuses_an_observation_it_cannot_read():
    trial = TrialInfo("t", 0, OVERCOOKED, (ActorInfo("a", "cook", "p"),))
    with pytest.raises(TrialogError, match="default Overcooked feature set"):
        OvercookedPlanner(trial, trial.actors[0]).decide(np.zeros(100, np.float32))


# --- the random actor ------------------------------------------------------------


def random_agent(name: str, seed: int, schema) -> RandomAgent:
    trial = TrialInfo("t", seed, {}, (ActorInfo(name, "c", "random"),))
    agent = RandomAgent(trial, trial.actors[0])
    agent.action_schema = schema
    return agent


DISCRETE = {"type": "long", "trialog.space": {"type": "Discrete", "n": 6, "start": 10}}


def test_random_actions_are_deterministic_per_seed_and_name_and_in_range():
    def draws(name: str, seed: int) -> list[int]:
        agent = random_agent(name, seed, DISCRETE)
        return [agent.decide(None) for _ in range(50)]

    assert draws("alice", 1) == draws("alice", 1)
    assert draws("alice", 1) != draws("bob", 1) and draws("alice", 1) != draws("alice", 2)
    assert set(draws("alice", 1)) == set(range(10, 16))


def test_random_actions_honour_the_action_mask():
    agent = random_agent("alice", 0, DISCRETE)
    mask = np.array([0, 0, 1, 0, 1, 0], np.int8)
    assert {agent.decide({"action_mask": mask}) for _ in range(50)} == {12, 14}


def test_random_actions_for_a_box_come_from_the_space_or_its_description():
    box = {"type": "Box", "shape": [2], "dtype": "float32", "low": [-1.0, 0.0], "high": [1.0, None]}
    trial = TrialInfo("t", 0, {}, (ActorInfo("arm", "c", "random", config={"action_space": box}),))
    action = RandomAgent(trial, trial.actors[0]).decide(None)
    assert action.dtype == np.float32 and -1 <= action[0] <= 1 and action[1] >= 0
    with pytest.raises(TrialogError, match="trialog.space"):
        random_agent("arm", 0, "trialog.Tensor").decide(None)  # a bare tensor carries no bounds
    with pytest.raises(TrialogError, match="knows no action space"):
        random_agent("arm", 0, None).decide(None)
