"""Learning pieces without a broker: transitions, memory, model versions, DQN, presets."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from tests.harness import cartpole_trials
from trialog.actor import DecideRequest
from trialog.bus.base import Record
from trialog.bus.memory import MemoryBus
from trialog.datalog.samples import Sample, TrialFold
from trialog.environment import ActorInfo, TrialInfo
from trialog.errors import TrialogError
from trialog.learn import trained_on_every_step
from trialog.learn.dqn import DQNConfig, DQNLearner, DQNPolicy
from trialog.learn.memory import ReplayMemory, flat_observation, one_step, transitions
from trialog.learn.train import Schedule, derived_spec, load_preset
from trialog.model_registry import ModelVersion, from_safetensors, make_version
from trialog.protocol.events import Reward
from trialog.protocol.topics import EVENTS
from trialog.services.learner.handler import LearnerHandler

ROOT = Path(__file__).resolve().parents[2]


def sample(tick: int, obs, action, reward: float, *, terminated=False, final=False, version=None) -> Sample:
    return Sample(
        "t",
        tick,
        "agent",
        "agent",
        "dqn",
        b"",
        b"" if action is not None else None,
        reward,
        (),
        terminated=terminated,
        final=final,
        observation=np.array(obs, np.float32),
        action=action,
        policy_version=version,
    )


def test_transitions_pair_each_tick_with_the_next_observation_and_its_end():
    samples = [
        sample(0, [0, 0], 1, 1.0, version=3),
        sample(1, [1, 1], 0, 0.5, version=4),
        sample(2, [2, 2], None, 0.0, terminated=True, final=True),
    ]
    t = transitions(samples)
    assert t.observations.tolist() == [[0, 0], [1, 1]]
    assert t.next_observations.tolist() == [[1, 1], [2, 2]]
    assert t.actions.tolist() == [1, 0] and t.rewards.tolist() == [1.0, 0.5]
    assert t.dones.tolist() == [0.0, 1.0]  # the episode ended on reaching tick 2
    assert t.versions.tolist() == [3, 4]
    assert transitions(samples[-1:]) is None


def test_flat_observation_of_a_dict_is_its_values_in_key_order():
    assert flat_observation({"b": [3, 4], "a": 1}).tolist() == [1, 3, 4]


def test_replay_memory_overwrites_the_oldest_when_full():
    memory = ReplayMemory(3, 2)
    t = transitions([sample(i, [i, i], 0, float(i)) for i in range(5)])
    serials = memory.add(t)
    assert serials.tolist() == [0, 1, 2, 3] and memory.size == 3 and memory.added == 4
    assert sorted(memory.rewards.tolist()) == [1.0, 2.0, 3.0]
    assert memory.holds(serials).tolist() == [False, True, True, True]
    memory.set_rewards(serials, np.array([9.0, 8.0, 7.0, 6.0]))  # the overwritten one is not there to correct
    assert sorted(memory.rewards.tolist()) == [6.0, 7.0, 8.0]


def test_one_step_at_a_time_is_the_same_transitions_and_memory_as_a_batch():
    """The learner service adds each env step on its own (one_step, a memory add of one): the
    same rows, and the same memory — slots, serials, links, overwrites — as the whole sequence
    made and added at once."""
    steps = [sample(i, [i, -i], i % 2, float(i), terminated=i == 7, version=i + 10) for i in range(8)]
    batch = transitions(steps)
    singles = [
        one_step(s.observation, s.action, s.reward, n.observation, n.terminated, s.policy_version)
        for s, n in zip(steps, steps[1:])
    ]
    for field in ("observations", "actions", "rewards", "next_observations", "dones", "versions"):
        assert np.concatenate([getattr(t, field) for t in singles]).tolist() == getattr(batch, field).tolist()
    assert all(t.ends.tolist() == [1.0] for t in singles)  # each the last of its batch
    assert transitions([steps[0], steps[2]]) is None  # a tick apart: no transition
    assert transitions([sample(0, [0, 0], None, 0.0), steps[1]]) is None  # no action at tick 0

    whole, one_by_one = ReplayMemory(5, 2), ReplayMemory(5, 2)  # 7 transitions: the first two overwritten
    whole.add(batch, demonstration=True)
    follows = -1
    for t in singles:
        follows = int(one_by_one.add(t, follows=follows, demonstration=True)[0])
    for field in ("observations", "next_observations", "actions", "rewards", "dones", "demonstrated", "serials"):
        assert getattr(one_by_one, field).tolist() == getattr(whole, field).tolist(), field
    assert one_by_one.successors.tolist() == whole.successors.tolist()
    assert (one_by_one.size, one_by_one.added) == (whole.size, whole.added) == (5, 7)
    assert one_by_one.successors.tolist() == [6, -1, 3, 4, 5]  # slots 0..4 hold serials 5, 6, 2, 3, 4
    one_by_one.add(singles[0], follows=0)  # serial 0 was overwritten: nothing links to the new one (7, slot 2)
    assert one_by_one.successors.tolist() == [6, -1, -1, 4, 5]


def test_transitions_end_where_the_episode_ends_or_a_tick_is_missing():
    ticks = [0, 1, 2, 4, 5, 6]  # tick 3 is missing: 2's successor is not in the log
    t = transitions([sample(i, [i], 0, 1.0, terminated=i == 6) for i in ticks])
    assert t.observations[:, 0].tolist() == [0, 1, 4, 5]
    assert t.ends.tolist() == [0.0, 1.0, 0.0, 1.0]


def nstep_sample(memory: ReplayMemory, slots: list[int]) -> dict[str, list]:
    """Sample exactly these slots (a generator that draws them in order)."""

    class Fixed:
        def integers(self, low, high, shape):
            return np.array(slots).reshape(shape)

    batch = memory.sample(Fixed(), len(slots))
    return {k: v[0].tolist() for k, v in batch.items()}


def test_n_step_returns_stop_at_the_end_of_a_sequence_and_at_a_termination():
    memory = ReplayMemory(16, 1, n_step=3, gamma=0.5)
    # One trial of 4 transitions ending in a termination, then one of 2 cut by a missing tick.
    memory.add(transitions([sample(i, [i], 0, 1.0, terminated=i == 4) for i in range(5)]))
    memory.add(transitions([sample(i, [10 + i], 0, 2.0) for i in range(3)]))
    b = nstep_sample(memory, [0, 1, 2, 3, 4, 5])
    assert b["rewards"] == [1.75, 1.75, 1.5, 1.0, 3.0, 2.0]  # 1 + .5 + .25; the last of each sequence alone
    assert b["discounts"] == [0.125, 0.125, 0.25, 0.5, 0.25, 0.5]
    assert [o[0] for o in b["next_obs"]] == [3, 4, 4, 4, 12, 12]
    assert b["dones"] == [0.0, 1.0, 1.0, 1.0, 0.0, 0.0]  # from the last transition counted


def test_n_step_returns_use_only_what_has_been_added_and_rewards_corrected_later():
    memory = ReplayMemory(4, 1, n_step=3, gamma=0.5)
    steps = transitions([sample(i, [i], 0, 1.0) for i in range(7)])  # one sequence of 6, added a step at a time
    steps.ends[:] = 0  # each goes on in the next one added
    one_step = [
        dataclasses.replace(steps, **{f: getattr(steps, f)[i : i + 1] for f in steps.__dataclass_fields__})
        for i in range(6)
    ]
    serials = [int(memory.add(t)[0]) for t in one_step[:2]]
    assert nstep_sample(memory, [1])["rewards"] == [1.0]  # its successor is not in memory yet
    assert nstep_sample(memory, [1])["discounts"] == [0.5]
    memory.set_rewards(np.array(serials[1:]), np.array([4.0]))  # a retroactive reward corrected it
    assert nstep_sample(memory, [0])["rewards"] == [3.0]
    for t in one_step[2:]:  # the ring wraps: slots 2, 3, 0, 1
        memory.add(t)
    # The newest (slot 1) is followed by the oldest, never its successor.
    assert [nstep_sample(memory, [i])["rewards"][0] for i in (1, 0, 3)] == [1.0, 1.5, 1.75]


def test_n_step_returns_follow_links_across_interleaved_sequences():
    memory = ReplayMemory(6, 1, n_step=3, gamma=0.5)
    a = transitions([sample(i, [i], 0, 1.0) for i in range(4)])  # trial a: 3 steps
    b = transitions([sample(i, [10 + i], 0, 2.0) for i in range(4)])  # trial b: 3 steps, added in turn with a's
    one = [
        [dataclasses.replace(t, **{f: getattr(t, f)[i : i + 1] for f in t.__dataclass_fields__}) for i in range(3)]
        for t in (a, b)
    ]
    last = {0: -1, 1: -1}
    for i in range(3):
        for k in (0, 1):
            last[k] = int(memory.add(one[k][i], follows=last[k])[0])
    # Slots 0, 2, 4 hold a's steps, 1, 3, 5 b's: each return follows its own trial.
    b_ = nstep_sample(memory, [0, 1, 2, 4])
    assert b_["rewards"] == [1.75, 3.5, 1.5, 1.0]
    assert [o[0] for o in b_["next_obs"]] == [3, 13, 3, 3]
    # A new sequence overwrites slots 0 and 1: slot 1's old link (to b's next step) goes with it.
    memory.add(transitions([sample(i, [20 + i], 0, 8.0) for i in range(3)]))
    assert nstep_sample(memory, [0, 1, 3])["rewards"] == [12.0, 8.0, 3.0]


def test_one_step_sampling_is_the_plain_transition():
    memory = ReplayMemory(8, 1, gamma=0.9)
    memory.add(transitions([sample(i, [i], 0, float(i)) for i in range(4)]))
    b = nstep_sample(memory, [0, 1, 2])
    assert b["rewards"] == [0.0, 1.0, 2.0] and [o[0] for o in b["next_obs"]] == [1, 2, 3]
    assert np.allclose(b["discounts"], 0.9)


def test_model_version_inline_and_by_reference_checks_its_hash(tmp_path):
    tensors = {"q/w0": np.arange(6, dtype=np.float32).reshape(2, 3)}
    small = make_version("m", 1, "dqn", tensors, {"env_steps": 5})
    assert small.weights is not None and small.uri is None
    assert np.array_equal(small.tensors()["q/w0"], tensors["q/w0"]) and small.meta == {"env_steps": 5}
    big = make_version("m", 2, "dqn", tensors, {}, store=str(tmp_path), inline_limit=10)
    assert big.weights is None and big.uri.startswith("file://")
    assert np.array_equal(big.tensors()["q/w0"], tensors["q/w0"])
    with pytest.raises(TrialogError, match="too large"):
        make_version("m", 3, "dqn", tensors, {}, inline_limit=10)
    forged = dataclasses.replace(small, weights=small.weights[:-4] + b"\0\0\0\0")
    with pytest.raises(TrialogError, match="SHA-256"):
        forged.tensors()


def test_dqn_policy_explores_by_phase_and_acts_greedily_in_evaluation():
    cfg = DQNConfig(observation_size=2, actions=3, hidden=(4,))
    policy = DQNPolicy(dataclasses.asdict(cfg))
    learner = DQNLearner(cfg)
    me = ActorInfo("agent", "agent", "dqn")
    requests = [DecideRequest(TrialInfo(f"t{i}", seed=i, config={}, actors=(me,), phase=phase), me, tick, np.ones(2))
                for i, phase in enumerate(["heatup", "train", "evaluate"]) for tick in range(20)]  # fmt: skip
    before = policy.decide_batch(requests)
    assert before == policy.decide_batch(requests)  # deterministic given seed, actor and tick
    policy.set_weights(learner.policy_weights(), env_steps=10**9)  # fully decayed ε
    after = policy.decide_batch(requests)
    evaluation = after[40:]
    assert len(set(evaluation)) == 1  # same observation, greedy: one action
    assert len(set(after[:20])) > 1  # heatup stays uniform


def test_dqn_evaluates_at_its_eval_epsilon_and_outside_experiments_greedily():
    me = ActorInfo("agent", "agent", "dqn")
    cfg = DQNConfig(observation_size=2, actions=3, hidden=(4,), eval_e=0.5)
    learner = DQNLearner(cfg)
    greedy, exploring = (
        DQNPolicy(dataclasses.asdict(dataclasses.replace(cfg, eval_e=0.0))),
        DQNPolicy(dataclasses.asdict(cfg)),
    )
    for policy in (greedy, exploring):
        policy.set_weights(learner.policy_weights(), env_steps=10**9)

    def requests(phase):
        return [DecideRequest(TrialInfo(f"t{i}", seed=i, config={}, actors=(me,), phase=phase), me, tick, np.ones(2))
                for i in range(4) for tick in range(50)]  # fmt: skip

    best = greedy.decide_batch(requests("evaluate"))
    assert len(set(best)) == 1  # eval_e 0: the greedy action every time
    evaluated = exploring.decide_batch(requests("evaluate"))
    assert evaluated == exploring.decide_batch(requests("evaluate"))  # draws by (seed, actor, tick): replayable
    off = sum(a != best[0] for a in evaluated)
    assert 40 < off < 100  # ε 0.5 among 3 actions: a third of 200 decisions leave the greedy action
    assert exploring.decide_batch(requests("")) == best  # no experiment: greedy whatever eval_e says
    with pytest.raises(TrialogError, match="eval_e"):
        DQNConfig.of({"eval_e": 1.5})


def test_dqn_learner_round_trips_through_a_version(tmp_path):
    cfg = DQNConfig(
        observation_size=2, actions=2, hidden=(8,), batch_size=4, gradient_steps=3, learning_starts=0, train_frequency=4
    )
    learner = DQNLearner(cfg)
    learner.add(transitions([sample(i, [i, -i], i % 2, 1.0) for i in range(9)]))
    assert learner.rounds_due() == 2
    learner.train_round()
    version = make_version("m", 1, "dqn", learner.tensors(), learner.metadata())
    resumed = DQNLearner(cfg)
    resumed.restore(from_safetensors(version.weights), version.meta)
    assert resumed.env_steps == 8 and resumed.rounds == 1 and resumed.rounds_due() == 1
    for k, v in learner.policy_weights().items():
        assert np.array_equal(resumed.policy_weights()[k], v)


def test_a_version_is_current_only_once_no_round_is_owed_not_once_every_step_is_in():
    """What `trialog train` waits for before an evaluation: a learner that fell behind has every
    step in memory and rounds still to train; its versions meanwhile are not current."""
    cfg = DQNConfig(
        observation_size=2, actions=2, hidden=(8,), batch_size=4, gradient_steps=3, learning_starts=0, train_frequency=4
    )
    learner = DQNLearner(cfg)
    learner.add(transitions([sample(i, [i, -i], i % 2, 1.0) for i in range(13)]))
    steps = learner.env_steps
    assert steps == 12 and learner.rounds_due() == 3
    learner.train_round()  # one of three rounds: a version published now has seen every step
    assert learner.metadata()["env_steps"] == steps and not trained_on_every_step(learner.metadata(), -1, steps)
    learner.train_round()
    learner.train_round()
    assert learner.rounds_due() == 0 and trained_on_every_step(learner.metadata(), -1, steps)
    assert not trained_on_every_step(learner.metadata(), -1, steps + 4)  # the next round is owed at 16
    assert trained_on_every_step(learner.metadata(), -1, steps + 3)
    assert trained_on_every_step({}, steps, steps)  # the learner says it has settled at those steps
    assert not trained_on_every_step({}, -1, steps)  # a training learner's gauge (-1) says nothing
    # A learner that says nothing of rounds: its versions by the steps they saw.
    assert trained_on_every_step({"env_steps": 12}, -1, 12) and not trained_on_every_step({"env_steps": 11}, -1, 12)


def test_dqn_target_network_is_refreshed_every_interval_of_gradient_steps_inside_and_across_rounds():
    def learner(gradient_steps: int) -> DQNLearner:
        cfg = DQNConfig(
            observation_size=2,
            actions=2,
            hidden=(8,),
            batch_size=4,
            learning_starts=0,
            train_frequency=4,
            gradient_steps=gradient_steps,
            target_update_interval=4,
            learning_rate_decay_steps=0,
        )
        made = DQNLearner(cfg)
        made.add(transitions([sample(i, [i, -i], i % 2, 1.0, terminated=i == 8) for i in range(9)]))
        return made

    def params_after(updates: int) -> dict[str, np.ndarray]:  # the same minibatches, stopped after `updates`
        reference = learner(updates)
        reference.train_round()
        return reference.policy_weights()

    run = learner(6)
    start = run.policy_weights()
    run.train_round()  # updates 0..5: the target is refreshed before updates 0 and 4
    target = {k: np.asarray(v) for k, v in run.target.items()}
    assert all(np.array_equal(target[k], v) for k, v in params_after(4).items())
    assert not any(np.array_equal(target[k], v) for k, v in start.items() if k.startswith("w"))
    assert not any(np.array_equal(target[k], v) for k, v in run.policy_weights().items() if k.startswith("w"))
    run.train_round()  # updates 6..11: refreshed before update 8 (counted over the run, not per round)
    assert run.updates == 12
    assert all(np.array_equal(np.asarray(run.target[k]), v) for k, v in params_after(8).items())


def test_dqn_learning_rate_falls_linearly_to_zero_over_its_decay_steps():
    cfg = DQNConfig(
        observation_size=2,
        actions=2,
        hidden=(4,),
        learning_starts=0,
        train_frequency=10,
        gradient_steps=5,
        learning_rate_decay_steps=100,
    )
    assert cfg.updates_by(100) == 50 and cfg.updates_by(5) == 0
    learner = DQNLearner(cfg)
    ones = {k: np.ones_like(v) for k, v in learner.params.items()}
    state, rates = learner.optimizer.init(learner.params), []
    for _ in range(80):  # Adam's step for a constant gradient is the learning rate itself
        updates, state = learner.optimizer.update(ones, state, learner.params)
        rates.append(float(np.abs(np.asarray(updates["b0"])).max()))
    assert rates[0] == pytest.approx(cfg.learning_rate, rel=1e-3) and rates[25] == pytest.approx(
        cfg.learning_rate / 2, rel=1e-2
    )
    assert rates[50] == rates[79] == 0.0


def test_preset_loads_and_its_agent_parameters_reach_a_derived_spec(tmp_path):
    preset = load_preset(ROOT / "presets" / "dqn_cartpole.py")
    assert preset.name == "dqn-cartpole" and Path(preset.spec).is_file()
    raw = yaml.safe_load(derived_spec(preset, tmp_path).read_text())
    config = raw["actors"]["dqn"]["config"]
    assert config["model"] == "dqn-cartpole" and config["learning_rate"] == preset.agent["learning_rate"]


def test_a_derived_spec_lets_evaluations_pin_the_learning_actors_version_and_nothing_else(tmp_path):
    from trialog.learn.train import played_actors
    from trialog.runtime.pinned import pinned_actors, pins_allowed
    from trialog.spec import load_spec

    preset = load_preset(ROOT / "presets" / "dqn_cartpole.py")
    spec = load_spec(derived_spec(preset, tmp_path))
    played = played_actors(preset, spec)
    assert spec.actors["dqn"].overridable == ("model",) and pins_allowed(spec, played)
    (actor,) = pinned_actors(spec, played, "dqn", "dqn-cartpole@12")
    assert actor == {"name": "agent", "class": "agent", "implementation": "dqn", "config": {"model": "dqn-cartpole@12"}}
    assert pinned_actors(spec, {}, "ppo", "dqn-cartpole@12")[0]["config"] == {}  # only the pinned implementation's
    # the spec as written lets no request set `model`: evaluations run between stretches of training
    assert not pins_allowed(load_spec(preset.spec), played)


def test_unknown_hyperparameter_is_refused():
    with pytest.raises(TrialogError, match="unknown key"):
        DQNConfig.of({"learning_rat": 0.1})


def test_model_version_record_matches_its_schema():
    from trialog.bus.memory import MemoryBus
    from trialog.model_registry import decode, encode
    from trialog.settings import Settings

    bus = MemoryBus(Settings.load({}, environ={}))
    v = ModelVersion("m", 7, "dqn", "00" * 32, 3, weights=b"abc", metadata='{"x": 1}')
    assert decode(bus, encode(bus, v)) == v


def test_behaviour_cloning_learns_the_demonstrated_mapping(tmp_path):
    import orjson
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trialog.learn import bc

    rng = np.random.default_rng(0)
    observations = rng.normal(size=(512, 3)).astype(np.float32)
    actions = (observations[:, 0] > 0).astype(int) + 2 * (observations[:, 1] > 0)  # 4 classes
    pq.write_table(pa.table({
        "implementation": ["planner"] * 512 + ["random"] * 8,
        "observation": [orjson.dumps(o.tolist()).decode() for o in observations] + ["[0, 0, 0]"] * 8,
        "action": [str(int(a)) for a in actions] + ["0"] * 8,
        "timed_out": [False] * 520,
    }), tmp_path / "demos.parquet")  # fmt: skip
    obs, acts = bc.demonstrations(str(tmp_path / "demos.parquet"), "planner")
    assert obs.shape == (512, 3) and acts.tolist() == actions.tolist()
    cfg = bc.BCConfig(observation_size=3, actions=4, hidden=(32,), epochs=60, batch_size=64, greedy=True)
    params = bc.train(cfg, obs, acts, log=None)
    policy = bc.BCPolicy(dataclasses.asdict(cfg))
    policy.params = params
    me = ActorInfo("cook_a", "cook", "bc")
    chosen = policy.decide_batch([DecideRequest(TrialInfo("t", 0, {}, (me,)), me, i, o) for i, o in enumerate(obs)])
    assert np.mean(np.array(chosen) == acts) > 0.9
    with pytest.raises(TrialogError, match="no demonstrations"):
        bc.demonstrations(str(tmp_path / "demos.parquet"), "human")


def test_ppo_learner_trains_a_full_rollout_and_round_trips():
    # Which transitions a batch uses: tests/unit/test_learn_ppo.py; its in-process runs:
    # tests/unit/test_learn_in_process.py.
    from trialog.learn.ppo import PPOConfig, PPOLearner

    cfg = PPOConfig(observation_size=2, actions=2, hidden=(8,), rollout_steps=8, minibatches=2, update_epochs=2)
    learner = PPOLearner(cfg)
    learner.published(1)
    learner.add(transitions([sample(i, [i, -i], i % 2, 1.0, version=1) for i in range(6)]))
    assert learner.rounds_due() == 0
    learner.add(transitions([sample(i, [i, i], i % 2, 1.0, terminated=i == 5, version=1) for i in range(6)]))
    assert learner.rounds_due() == 1
    learner.train_round()
    assert learner.rounds_due() == 0 and learner.rounds == 1 and learner.round_scalars["batch"] == 10
    version = make_version("m", 2, "ppo", learner.tensors(), learner.metadata())
    resumed = PPOLearner(cfg)
    resumed.restore(from_safetensors(version.weights), version.meta)
    for k, v in learner.policy_weights().items():
        assert np.array_equal(resumed.policy_weights()[k], v)


async def test_an_off_policy_learner_slower_than_its_samples_publishes_after_each_round():
    """In-process the next step acts with the latest round's weights: through the log an
    off-policy learner with rounds still owed publishes after each one, not once it has
    caught up (a learner slower than its samples would otherwise hardly publish) — and goes
    on to the next owed round at once, not at the service loop's next periodic sweep (that
    capped it at five rounds a second, whatever a round took)."""
    from trialog.services.learner.handler import ROUNDS_PER_VERSION, LearnerHandler

    class Behind:
        on_policy = False

        def __init__(self):
            self.owed = 5

        @classmethod
        def learner(cls, config):
            return cls()

        def rounds_due(self):
            return self.owed

        def train_round(self):
            self.owed -= 1
            return 0.5

    handler = LearnerHandler("dqn", Behind, {"model": "m"})
    published = []

    async def publish(loss, rounds, number=None):
        published.append((number, rounds))

    handler._publish = publish
    await handler._train()  # one training task: every owed round, a version after each
    assert published == [(v, ROUNDS_PER_VERSION) for v in range(1, 6)] and ROUNDS_PER_VERSION == 1
    assert handler.learner.rounds_due() == 0
    # A stopping service publishes the round it trains and leaves the rest owed (a restart resumes).
    handler = LearnerHandler("dqn", Behind, {"model": "m"})
    handler._publish = publish
    published.clear()
    handler._training = asyncio.create_task(handler._train())
    await handler.close()
    assert published == [(1, 1)] and handler.learner.rounds_due() == 4
    # An on-policy learner makes one version of whatever is owed (its samples are that version's).
    handler = LearnerHandler("ppo", type("OnPolicy", (Behind,), {"on_policy": True}), {"model": "m"})
    handler._publish = publish
    published.clear()
    await handler._train()
    assert published == [(1, 5)]


async def test_a_learner_told_its_reward_sources_learns_from_those_only(memory_settings):
    """Learning from a judge: with --learn-from 'person:*' the environment's reward of 1 a
    tick is left out of every transition and the judge's ratings — early, late (after the
    tick's transition is in memory) and corrected — are what memory holds; told nothing,
    the learner aggregates every source, as the datalog does."""
    bus, logged = await cartpole_trials(memory_settings, seeds=(3,))
    ((tid, events),) = logged.items()
    judged = {2: 0.25, 5: -1.0}  # tick -> the judge's last word (tick 5 is corrected)

    def rating(tick, value, offset):
        reward = Reward(tid, tick=tick, receiver="agent", value=value, confidence=0.5, sender="person:ann")
        return Record(EVENTS, 0, offset, tid.encode(), b"", (), 0), reward

    records = [(Record(EVENTS, 0, i, r.key, r.value, r.headers, r.timestamp_ms), e) for i, (r, e) in enumerate(events)]
    n = len(records)
    observed_2 = next(i for i, (_, e) in enumerate(records) if e.KIND == "observation" and e.tick == 2)
    records.insert(observed_2 + 1, rating(2, 0.25, n))  # tick 2 observed, its transition not yet complete
    records += [rating(5, 0.75, n + 1), rating(5, -1.0, n + 2)]  # after it, then corrected
    config = {"observation_size": 4, "actions": 2, "buffer_size": 10_000, "learning_starts": 10**9}

    def memory_rewards(learn_from) -> dict[int, float]:
        handler = LearnerHandler("random", DQNPolicy, config, learn_from=learn_from)
        handler.loop = SimpleNamespace(bus=bus)
        handler.restored.set()
        for record, event in records:
            if handler.should_decode(record, event.KIND):
                handler.handle(record, event)
        serials = handler.recent[tid].serials["agent"]
        memory = handler.learner.memory
        return {tick: float(memory.rewards[serial % memory.capacity]) for tick, serial in serials.items()}

    judge_only = memory_rewards(("person:*",))
    assert len(judge_only) > 6 and judge_only == {t: judged.get(t, 0.0) for t in judge_only}
    every_source = memory_rewards(())
    assert every_source[0] == 1.0 and every_source[2] == pytest.approx((1.0 + 0.5 * 0.25) / 1.5)
    assert every_source[5] == pytest.approx((1.0 - 0.5) / 1.5)
    with pytest.raises(ValueError, match="not ''"):
        LearnerHandler("random", DQNPolicy, config, learn_from=("",))


async def test_a_learner_decodes_only_the_records_of_trials_it_folds(memory_settings):
    """An evaluation trial's records are skipped undecoded, its rewards too; a folded trial's
    observations and actions are read in place (no event decoded), its other records decoded,
    and a reward for it is decoded while it runs and after its end (late rewards correct memory)."""
    bus, logged = await cartpole_trials(memory_settings, seeds=(1,))
    ((tid, events),) = logged.items()
    handler = LearnerHandler("random", DQNPolicy, {"observation_size": 4, "actions": 2, "learning_starts": 10**9})
    handler.loop = SimpleNamespace(bus=bus)
    handler.restored.set()
    evaluated = [(r, dataclasses.replace(e, phase="evaluate") if e.KIND == "trial.started" else e) for r, e in events]
    for record, event in evaluated:
        if handler.should_decode(record, event.KIND):
            handler.handle(record, event)
    decoded = {e.KIND for r, e in evaluated if handler.should_decode(r, e.KIND)}
    assert decoded == {"trial.started"} and tid not in handler.trials and tid not in handler.recent
    in_place = set()
    for record, event in events:  # the train phase's trial: folded, then ended
        if handler.should_decode(record, event.KIND):
            handler.handle(record, event)
        else:
            in_place.add(event.KIND)
    assert in_place == {"observation", "action"} and handler.learner.env_steps > 0
    # The environment's rewards ride in the observations; a judge's reward for the ended trial is decoded.
    assert not [e for _, e in events if e.KIND == "reward"] and all(
        e.reward is not None for _, e in events if e.KIND == "observation" and e.tick > 0
    )
    late = Reward(tid, tick=1, receiver="agent", value=0.5, sender="judge")
    _, key, value, headers = bus.to_record(EVENTS, late)
    record = Record(EVENTS, 0, len(events), key, value, tuple(headers), 0)
    assert tid in handler.recent and handler.should_decode(record, "reward")
    assert not handler.should_decode(dataclasses.replace(record, key=b"trial-unknown"), "reward")


async def test_a_learner_skips_forged_and_altered_observations_and_actions_it_reads_in_place(memory_settings):
    """Before each genuine observation and action of a folded trial, an altered copy (its body
    changed under its tag) and a forged one (the tick header moved on, the body and tag as
    they were): the learner's memory is what the genuine records alone give it, and the fold
    keeps no note of the skipped records."""
    bus, logged = await cartpole_trials(memory_settings, seeds=(1,))
    ((tid, events),) = logged.items()
    config = {"observation_size": 4, "actions": 2, "learning_starts": 10**9, "buffer_size": 1000}

    def learner_over(records) -> LearnerHandler:
        handler = LearnerHandler("random", DQNPolicy, config)
        handler.loop = SimpleNamespace(bus=bus)
        handler.restored.set()
        for i, (record, event) in enumerate(records):
            record = dataclasses.replace(record, offset=i)
            if handler.should_decode(record, event.KIND):
                handler.handle(record, event)
        return handler

    attacked = []
    for record, event in events:
        if event.KIND in ("observation", "action"):
            altered = dataclasses.replace(
                record, value=record.value[:-2] + bytes([record.value[-2] ^ 1]) + record.value[-1:]
            )
            moved = tuple((k, str(event.tick + 1).encode() if k == "tick" else v) for k, v in record.headers)
            attacked += [(altered, event), (dataclasses.replace(record, headers=moved), event)]
        attacked.append((record, event))
    genuine, under_attack = learner_over(events), learner_over(attacked)
    a, b = genuine.learner.memory, under_attack.learner.memory
    assert a.added == b.added == genuine.learner.env_steps == under_attack.learner.env_steps > 10
    assert np.array_equal(a.observations[: a.added], b.observations[: b.added])
    assert np.array_equal(a.actions[: a.added], b.actions[: b.added])
    assert under_attack.recent[tid].fold.problems == []


async def test_learner_service_adds_each_step_as_logged_following_each_actors_sequence(memory_settings):
    """Two trials' records, interleaved as a log of several partitions may hand them over:
    the learner's memory holds each transition once, as the trial's whole fold gives it,
    n-step returns follow each trial's own steps, a late reward corrects its transition,
    and a learner replaying the log after a restart counts only what its version did not."""
    bus, logged = await cartpole_trials(memory_settings, seeds=(1, 2))
    tids = list(logged)
    a, b = logged.values()
    interleaved = [x for pair in zip(a, b) for x in pair] + a[len(b) :] + b[len(a) :]
    # One partition, offsets in the order fed; one observation fed twice (a redelivery).
    records = [
        (Record(EVENTS, 0, i, r.key, r.value, r.headers, r.timestamp_ms), e) for i, (r, e) in enumerate(interleaved)
    ]
    records.insert(40, records[39 if records[39][1].KIND == "observation" else 38])
    late = Reward(tids[0], tick=3, receiver="agent", value=50.0, confidence=1.0, sender="judge")
    records.append((Record(EVENTS, 0, len(records), tids[0].encode(), b"", (), 0), late))

    config = {
        "observation_size": 4,
        "actions": 2,
        "n_step": 3,
        "gamma": 0.5,
        "buffer_size": 10_000,
        "learning_starts": 10**9,
    }

    def learner_over(records, counted_through=-1) -> LearnerHandler:
        handler = LearnerHandler("random", DQNPolicy, config)
        handler.loop = SimpleNamespace(bus=bus)
        handler.restored.set()
        handler.counted_through = {0: counted_through}
        for record, event in records:
            if handler.should_decode(record, event.KIND):
                handler.handle(record, event)
        return handler

    handler = learner_over(records)
    expected = {}
    for tid, events in logged.items():
        fold = TrialFold(tid, bus.store)
        for _, e in events + ([(None, late)] if tid == tids[0] else []):
            fold.add(e)
        expected[tid] = transitions(fold.samples())
    memory = handler.learner.memory
    assert memory.added == handler.learner.env_steps == sum(len(t) for t in expected.values())
    for tid, t in expected.items():
        serials = handler.recent[tid].serials["agent"]
        assert sorted(serials) == list(range(len(t)))
        slots = [serials[tick] % memory.capacity for tick in range(len(t))]
        assert np.array_equal(memory.observations[slots], t.observations) and np.array_equal(
            memory.rewards[slots], t.rewards
        )
        alone = ReplayMemory(10_000, 4, n_step=3, gamma=0.5)
        alone.add(t)
        assert nstep_sample(memory, slots) == nstep_sample(alone, list(range(len(t))))
    assert (
        memory.rewards[handler.recent[tids[0]].serials["agent"][3]]
        == pytest.approx(expected[tids[0]].rewards[3])
        != 1.0
    )

    # Restarted with a version that counted the log up to offset 100: the rest counts, all refills.
    resumed = learner_over(records, counted_through=100)
    completed_after = len(
        {(e.trial_id, e.tick) for r, e in records if r.offset > 100 and e.KIND == "observation" and e.tick > 0}
    )
    assert 0 < completed_after < memory.added
    assert resumed.learner.memory.added == memory.added and resumed.learner.env_steps == completed_after


@pytest.mark.parametrize(
    "field, value",
    [("concurrency", 0), ("total_steps", -5), ("evaluation_trials", 0), ("heatup_steps", -1), ("concurrency", 2.5)],
)
def test_a_schedule_that_could_not_run_is_refused_with_its_field(field, value):
    with pytest.raises(TrialogError, match=f"schedule: {field} must be"):
        Schedule(**{field: value})


async def test_a_learner_whose_newest_version_was_imported_starts_afresh_after_it():
    """`trialog models import` publishes a policy's weights alone: a learner restarted over it
    cannot resume from it (no target, optimizer or counters), so it starts afresh and numbers
    its versions after the imported one, rather than failing to start or reusing its number."""
    from trialog import model_registry
    from trialog.settings import Settings

    bus = MemoryBus(Settings.load({}, environ={}))
    config = {"observation_size": 4, "actions": 2, "model": "cartpole-dqn", "learning_starts": 10**9}
    trained = DQNLearner(DQNConfig.of(config))
    policy_only = {k: v for k, v in trained.policy_weights().items()}
    imported = make_version("cartpole-dqn", 7, "dqn", policy_only, {"imported_from": {"file": "q.safetensors"}})
    async with bus:
        await model_registry.publish(bus, imported)
        handler = LearnerHandler("dqn", DQNPolicy, config)
        handler.loop = SimpleNamespace(bus=bus)
        await handler._restore()
    assert handler.restored.is_set() and handler.version == 7 and handler.learner.env_steps == 0
