"""DQN's demonstrator: an Agent that acts in heatup trials in the learner's seat."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

import trialog.learn.dqn as dqn
from tests.harness import cartpole_trials
from trialog.actor import Agent, DecideRequest
from trialog.environment import ActorInfo, TrialInfo
from trialog.errors import SpecError, TrialogError
from trialog.learn import demonstrated, takes_demonstrations
from trialog.learn.dqn import DQNConfig, DQNLearner, DQNPolicy
from trialog.learn.in_process import InProcess
from trialog.learn.memory import Transitions
from trialog.learn.nets import mlp
from trialog.services.learner.handler import LearnerHandler

ME = ActorInfo("cook_a", "cook", "dqn")
HERE = __name__


class Counting(Agent):
    """Acts (trial seed + observations seen so far) mod 3: its actions show which agent of which
    trial decided, and that it saw every observation of its trial in order."""

    def __init__(self, trial: TrialInfo, actor: ActorInfo) -> None:
        super().__init__(trial, actor)
        self.seen = 0

    def decide(self, observation) -> int:
        self.seen += 1
        return (self.trial.seed + self.seen) % 3


class NotAnAgent:
    pass


def policy(**changes) -> DQNPolicy:
    cfg = DQNConfig(
        **{
            "observation_size": 2,
            "actions": 3,
            "hidden": (4,),
            "end_e": 0.0,
            "demonstrator": f"{HERE}:Counting",
            **changes,
        }
    )
    p = DQNPolicy(dataclasses.asdict(cfg))
    p.set_weights(DQNLearner(dataclasses.replace(cfg, demonstrator=None)).policy_weights(), env_steps=10**9)
    return p


def request(trial: str, seed: int, tick: int, phase: str) -> DecideRequest:
    return DecideRequest(TrialInfo(trial, seed=seed, config={}, actors=(ME,), phase=phase), ME, tick, np.ones(2))


def test_the_demonstrator_acts_in_heatup_trials_one_agent_per_trial():
    p = policy()
    # Two heatup trials interleaved, in two batches: each trial's agent counts its own observations.
    first = p.decide_batch([request("a", 0, 0, "heatup"), request("b", 1, 0, "heatup"), request("a", 0, 1, "heatup")])
    second = p.decide_batch([request("b", 1, 1, "heatup"), request("a", 0, 2, "heatup")])
    assert first == [1, 2, 2]  # a: (0+1)%3, b: (1+1)%3, a: (0+2)%3
    assert second == [0, 0]  # b: (1+2)%3, a: (0+3)%3
    # Train and evaluation trials are the network's: greedy at ε end/eval 0, one action for one observation.
    others = p.decide_batch([request(f"t{i}", i, 0, phase) for i in range(6) for phase in ("train", "evaluate")])
    assert len(set(others)) == 1
    assert ("t0", "cook_a") not in p._demonstrating


def test_without_a_demonstrator_heatup_stays_uniform():
    p = policy(demonstrator=None)
    actions = p.decide_batch([request("a", 0, tick, "heatup") for tick in range(60)])
    assert set(actions) == {0, 1, 2}


def test_the_oldest_trials_agents_are_dropped_past_the_bound(monkeypatch):
    monkeypatch.setattr(dqn, "DEMONSTRATING_AT_MOST", 2)
    p = policy()
    p.decide_batch([request(t, 0, 0, "heatup") for t in ("a", "b", "c")])
    assert list(p._demonstrating) == [("b", "cook_a"), ("c", "cook_a")]


def test_a_demonstrator_that_is_not_an_agent_class_is_refused_with_its_name():
    with pytest.raises(TrialogError, match="not an Agent class"):
        policy(demonstrator=f"{HERE}:NotAnAgent")
    with pytest.raises(SpecError, match="cannot import"):
        policy(demonstrator="no_such_module_here:Cook")
    with pytest.raises(TrialogError, match="demonstrator"):
        DQNConfig.of({"demonstrator": 3})


def demonstrations(n: int = 64) -> Transitions:
    """Terminal steps of reward 0 (every TD target is 0) whose demonstrated action is 2 when the
    first feature is positive, else 0."""
    obs = np.random.default_rng(0).normal(size=(n, 2)).astype(np.float32)
    return Transitions(
        observations=obs,
        actions=np.where(obs[:, 0] > 0, 2, 0).astype(np.int32),
        rewards=np.zeros(n, np.float32),
        next_observations=obs,
        dones=np.ones(n, np.float32),
        versions=np.full(n, -1, np.int64),
        ends=np.ones(n, np.float32),
    )


@pytest.mark.parametrize("demonstration", [True, False])
def test_the_margin_loss_puts_the_demonstrated_action_first(demonstration):
    cfg = DQNConfig(
        observation_size=2, actions=3, hidden=(32,), learning_rate=1e-2, learning_rate_decay_steps=0,
        learning_starts=0, train_frequency=64, gradient_steps=200, batch_size=32, demonstrator=f"{HERE}:Counting",
    )  # fmt: skip
    learner = DQNLearner(cfg)
    assert learner.takes_demonstrations
    t = demonstrations()
    learner.add(t, demonstration=demonstration)
    assert learner.memory.demonstrated[: len(t)].tolist() == [float(demonstration)] * len(t)
    for _ in range(10):
        learner.train_round()
    q = mlp(learner.policy_weights(), t.observations)
    chosen = q.argmax(axis=1)
    if demonstration:
        assert (chosen == t.actions).all()
        best_other = np.where(np.eye(3, dtype=bool)[t.actions], -np.inf, q).max(axis=1)
        assert (q[np.arange(len(t)), t.actions] - best_other).min() > 0.4  # near the margin, 0.8
    else:
        assert (chosen == t.actions).mean() < 0.9  # TD alone: every value near 0, no action preferred
    # The TD targets (0) hold the demonstrated actions' values down: the margin lowers the others.
    assert np.abs(q[np.arange(len(t)), t.actions]).mean() < 0.3


def test_a_heatup_trial_is_a_demonstration_only_for_a_learner_that_takes_them():
    assert not DQNLearner(DQNConfig(observation_size=2, actions=3, hidden=(4,))).takes_demonstrations
    from trialog.learn.ppo import PPOConfig, PPOLearner

    ppo = PPOLearner(PPOConfig(observation_size=2, actions=3))
    assert not ppo.takes_demonstrations
    with pytest.raises(TrialogError, match="no demonstrations"):
        ppo.add(demonstrations(2), demonstration=True)


async def test_the_learner_service_marks_a_heatup_trials_steps_as_demonstrations(memory_settings):
    """Through the log: the learner service adds a heatup trial's steps as demonstrations when
    its DQN names a demonstrator, and a train trial's (or any trial's, without one) as its own."""
    bus, logged = await cartpole_trials(memory_settings, seeds=(2,))
    ((_, events),) = logged.items()

    def marks(phase: str, demonstrator: str | None) -> set[float]:
        config = {"observation_size": 4, "actions": 2, "learning_starts": 10**9, "demonstrator": demonstrator}
        handler = LearnerHandler("random", DQNPolicy, config)
        handler.loop = SimpleNamespace(bus=bus)
        handler.restored.set()
        for record, event in events:
            event = dataclasses.replace(event, phase=phase) if event.KIND == "trial.started" else event
            if handler.should_decode(record, event.KIND):
                handler.handle(record, event)
        memory = handler.learner.memory
        assert memory.size > 5
        return set(memory.demonstrated[: memory.size].tolist())

    assert marks("heatup", f"{HERE}:Counting") == {1.0}
    assert marks("train", f"{HERE}:Counting") == {0.0}
    assert marks("heatup", None) == {0.0}


class Left(Agent):
    """CartPole's demonstrator here: always pushes left (action 0)."""

    def decide(self, observation) -> int:
        return 0


def test_in_process_the_heatup_is_the_demonstrators_and_its_steps_are_marked(tmp_path):
    from tests.unit.test_learn_in_process import tiny_dqn

    preset = tiny_dqn()
    preset = dataclasses.replace(preset, agent={**preset.agent, "demonstrator": f"{HERE}:Left"})
    run = InProcess(preset, tmp_path)
    result = run.run()
    memory = run.learner.memory
    marked = memory.demonstrated[: memory.size].astype(bool)
    heatup = int(marked.sum())
    assert heatup >= 200 and not marked[heatup:].any()  # the heatup's steps (200, then its trials' ends) first
    assert (memory.actions[:heatup] == 0).all()  # the demonstrator's actions
    assert len(set(memory.actions[heatup : memory.size].tolist())) == 2  # then the network's, ε-greedy
    assert run.learner.env_steps == result.env_steps
    assert run.policy._demonstrating == {}  # every heatup trial's agent dropped at its end


def test_a_learner_that_says_nothing_of_demonstrations_keeps_its_add():
    class Older:  # a learner written before demonstrations: no takes_demonstrations, add without the keyword
        def add(self, t, *, count=True, follows=-1):
            return np.arange(len(t))

    assert not takes_demonstrations(Older())
    assert Older().add(demonstrations(3), **demonstrated(False)).tolist() == [0, 1, 2]
    assert demonstrated(True) == {"demonstration": True}
    for bad in ({"margin": -0.1}, {"demonstration_weight": "1"}):
        with pytest.raises(TrialogError, match="≥ 0"):
            DQNConfig.of(bad)
