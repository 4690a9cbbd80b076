"""The contract check passes real environments and reports, check by check, what
is wrong with broken ones."""

from __future__ import annotations

import random

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import ParallelEnv

from trialog.cli import main as cli_main
from trialog.environment import Environment, Step
from trialog.errors import TrialogError
from trialog.tools.check import check_environment

PETTINGZOO = "trialog.adapters.pettingzoo:PettingZooEnvironment"
GYMNASIUM = "trialog.adapters.gymnasium:GymnasiumEnvironment"


@pytest.mark.parametrize(
    "entry, config",
    [
        (PETTINGZOO, {"env": "pettingzoo.classic.rps_v2:parallel_env"}),
        (GYMNASIUM, {"env": "CartPole-v1"}),
        (GYMNASIUM, {"env": "Pendulum-v1"}),  # a Box action: sampled from its bounds
        (
            PETTINGZOO,
            {
                "env": "cogrid.envs.registry:make",
                "kwargs": {"environment_id": "Overcooked-CrampedRoom-V0"},
                "name": "overcooked",
            },
        ),
    ],
    ids=["rps", "cartpole", "pendulum", "overcooked"],
)
def test_real_environments_pass(entry, config):
    report = check_environment(entry, config, steps=20)
    assert report.ok, str(report)
    assert [r.name for r in report.results] == [
        "load",
        "actors",
        "describe",
        "construct",
        "start",
        "observations",
        "update",
        "step types",
        "end",
        "determinism",
    ]
    report.raise_for_failures()


class Jittery(ParallelEnv):
    """Draws from Python's global random generator: the seed does not fix it."""

    metadata = {"name": "jittery_v0"}
    possible_agents = ["a", "b"]

    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {a: np.zeros(2, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        noise = {a: np.full(2, random.random(), np.float32) for a in self.agents}
        return (
            noise,
            {a: 0.0 for a in self.agents},
            {a: False for a in self.agents},
            {a: False for a in self.agents},
            {},
        )


def test_a_nondeterministic_env_fails_determinism_with_the_tick_and_actor():
    report = check_environment(PETTINGZOO, {"env": f"{__name__}:Jittery"}, steps=5)
    assert not report.ok
    [failure] = report.failures
    assert failure.name == "determinism"
    assert "tick 1: the observation of 'a' differs" in failure.message and "trial.seed" in failure.message
    text = str(report)
    assert "FAIL  determinism" in text and "9 passed, 1 failed" in text
    with pytest.raises(TrialogError, match="determinism"):
        report.raise_for_failures()


class Misfit(Jittery):
    """Observations that do not fit the space it declares."""

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {a: "not numbers" for a in self.agents}, {}


def test_observations_outside_their_space_fail_start():
    report = check_environment(PETTINGZOO, {"env": f"{__name__}:Misfit"})
    [failure] = report.failures
    assert failure.name == "start" and "'a'" in failure.message and "Box" in failure.message
    assert [r.name for r in report.results][-1] == "start"  # nothing after it could run


class Counter(Environment):
    """A hand-written environment whose update returns a bare bool for terminated."""

    SCHEMAS = {"observation": "long", "action": {"type": "long", "trialog.space": {"type": "Discrete", "n": 2}}}

    def start(self):
        self.count = 0
        return {a: 0 for a in self.trial.actor_names}

    def update(self, actions):
        self.count += 1
        return Step(observations={a: self.count for a in actions}, rewards={"nobody": 1.0}, terminated=False)


def test_hand_written_envs_get_their_step_types_checked():
    report = check_environment(Counter, actors=["solo"], schemas={"agent": Counter.SCHEMAS})
    [failure] = report.failures
    assert failure.name == "step types" and "Step.terminated is a bool" in failure.message


def test_without_describe_or_schemas_the_report_says_what_to_pass():
    report = check_environment(Counter, actors=["solo"])
    [failure] = report.failures
    assert failure.name == "describe" and "pass schemas=" in failure.message
    report = check_environment(Counter)
    assert report.failures[0].name == "actors" and "pass actors=" in report.failures[0].message


def test_check_command_exits_with_the_verdict(capsys):
    assert (
        cli_main(["check", PETTINGZOO, "--config", '{"env": "pettingzoo.classic.rps_v2:parallel_env"}', "--steps", "5"])
        == 0
    )
    assert "10 passed, 0 failed" in capsys.readouterr().out
    assert cli_main(["check", PETTINGZOO, "--config", f'{{"env": "{__name__}:Jittery"}}', "--steps", "3"]) == 1
