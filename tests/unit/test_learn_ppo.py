"""PPO's synchronous collection by version: which transitions a batch uses, which are late
(corrected) and which are discarded, the whole batch trained on, advantages along each
actor's sequence among interleaved steps, and the learner service training on a full batch
as soon as a poll completes it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest

from trialog.actor import DecideRequest
from trialog.environment import ActorInfo, TrialInfo
from trialog.learn import sampled_actions
from trialog.learn.memory import Transitions
from trialog.learn.nets import unprefixed
from trialog.learn.ppo import PPOConfig, PPOLearner, PPOPolicy
from trialog.services.learner.handler import LearnerHandler
from trialog.telemetry import metrics


def steps(n: int, version: int, *, seed: int = 0, terminated_last: bool = False) -> Transitions:
    """``n`` consecutive transitions of one actor acted by ``version`` (the last one ends them)."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n + 1, 2)).astype(np.float32)
    return Transitions(
        observations=obs[:-1],
        actions=rng.integers(0, 2, n).astype(np.int32),
        rewards=rng.normal(size=n).astype(np.float32),
        next_observations=obs[1:],
        dones=np.array([terminated_last and i == n - 1 for i in range(n)], np.float32),
        versions=np.full(n, version, np.int64),
        ends=(np.arange(n) == n - 1).astype(np.float32),
    )


def one_by_one(learner: PPOLearner, t: Transitions, follows: int = -1, *, count: bool = True) -> int:
    """Add ``t`` a step at a time, as the log completes them; returns the last serial."""
    for i in range(len(t)):
        row = Transitions(*(getattr(t, f)[i : i + 1] for f in Transitions.__dataclass_fields__))
        row.ends[:] = 1.0
        follows = int(learner.add(row, follows=follows, count=count)[0])
    return follows


def learner(**config) -> PPOLearner:
    cfg = {"observation_size": 2, "actions": 2, "hidden": (8,), "rollout_steps": 8, "minibatches": 2}
    return PPOLearner(PPOConfig(**{**cfg, "update_epochs": 2, **config}))


def test_a_batch_is_every_transition_of_the_version_trained_once_it_is_full():
    ppo = learner()
    ppo.published(1)
    one_by_one(ppo, steps(5, 1, seed=1))
    assert not ppo.rounds_due()  # 5 of 8
    one_by_one(ppo, steps(6, 1, seed=2))
    assert ppo.rounds_due()  # 11 ≥ 8: the whole batch trains, not its first 8
    ppo.train_round()
    assert ppo.round_scalars["batch"] == 11 and ppo.rounds == 1 and ppo.discarded == 0 and ppo.late == 0
    # Every transition once per epoch: 11 in minibatches of 4 (the rollout over 2) is 3 steps an epoch.
    assert ppo.updates == 2 * 3
    # Steps of version 1 still coming while version 2 is made do not make another round due.
    one_by_one(ppo, steps(9, 1, seed=3))
    assert not ppo.rounds_due()
    ppo.published(2)
    assert not ppo.rounds_due()
    one_by_one(ppo, steps(8, 2, seed=4))
    assert ppo.rounds_due()
    ppo.train_round()
    # They were late (acted by the version before): used, corrected, and counted as late.
    assert ppo.round_scalars["batch"] == 17 and ppo.late == 9 and ppo.discarded == 0
    assert ppo.metadata()["late"] == 9 and ppo.env_steps == 5 + 6 + 9 + 8


def test_a_batch_larger_than_the_compiled_shape_trains_in_calls_of_that_shape_the_same_steps():
    """Late transitions make batches through the log of any size; each size once compiled a shape
    of its own (most of the learner's training time went to XLA's compiler). A batch larger than the compiled
    shape now runs in several calls of it: the same steps, in the same order, as one scan over
    every minibatch (compiled here for the comparison)."""
    ppo = learner(update_epochs=3)
    ppo.published(1)
    one_by_one(ppo, steps(37, 1, seed=5))  # 10 minibatches of 4 an epoch where the shape holds 4
    before = (ppo.params, ppo.opt_state)
    state = ppo.rng.bit_generator.state
    ppo.train_round()
    assert ppo._update._cache_size() == 1 and ppo.updates == 3 * 10
    # The same round as one scan over all 3 x 10 minibatches: the rows drawn from the same state.
    again = learner(update_epochs=3)
    again.published(1)
    one_by_one(again, steps(37, 1, seed=5))
    again.rng.bit_generator.state = state
    again.params, again.opt_state = before
    calls = []
    update = again._update
    again._update = lambda *a: calls.append(a[2]["mask"].shape) or update(*a)
    again.slots = 10  # the compiled shape holds the whole round: one call
    again.train_round()
    assert calls == [(3 * 10, 4)]
    for key in ppo.params:
        for name in ppo.params[key]:
            np.testing.assert_allclose(
                np.asarray(ppo.params[key][name]), np.asarray(again.params[key][name]), rtol=1e-5, atol=1e-6
            )


def test_a_late_transition_of_an_older_version_is_discarded_and_counted():
    ppo = learner()
    ppo.published(1)
    one_by_one(ppo, steps(8, 1))
    ppo.train_round()
    ppo.published(2)
    one_by_one(ppo, steps(8, 2))
    ppo.train_round()
    ppo.published(3)
    one_by_one(ppo, steps(3, 1, seed=1))  # two versions old: beyond late_versions=1
    one_by_one(ppo, steps(2, -1, seed=2))  # acted by no model (before version 1 loaded)
    one_by_one(ppo, steps(4, 2, seed=3))  # one version old: late, used
    one_by_one(ppo, steps(8, 3, seed=4))
    one_by_one(ppo, steps(5, 1, seed=5), count=False)  # a restarted learner's replay: not counted again
    ppo.train_round()
    assert ppo.discarded == 3 + 2 and ppo.late == 4 and ppo.round_scalars["batch"] == 12
    assert ppo.metadata()["discarded"] == 5

    # late_versions=0: pure synchronous collection, anything not of the current version goes.
    strict = learner(late_versions=0)
    strict.published(1)
    one_by_one(strict, steps(8, 1))
    strict.train_round()
    one_by_one(strict, steps(2, 1, seed=1))  # acted while version 2 was being made
    strict.published(2)
    one_by_one(strict, steps(8, 2, seed=2))
    strict.train_round()
    assert strict.discarded == 2 and strict.late == 0 and strict.round_scalars["batch"] == 8


def test_late_transitions_take_their_ratio_against_the_version_that_acted():
    ppo = learner()
    ppo.published(1)
    one_by_one(ppo, steps(8, 1))
    acted = ppo.policy_weights()
    ppo.train_round()
    late, own = steps(3, 1, seed=7), steps(8, 2, seed=8)
    one_by_one(ppo, late)
    ppo.published(2)
    one_by_one(ppo, own)
    batch = ppo._batch(ppo.pending, 2, ppo.acted)
    logp = {}
    for name, weights in (("acted", acted), ("now", ppo.policy_weights())):
        logp_all = ppo._forward({"pi": weights, "v": ppo.params["v"]}, late.observations)[0]
        logp[name] = logp_all[np.arange(3), late.actions]
    assert np.allclose(batch["logp"][:3], logp["acted"], atol=1e-6)
    assert not np.allclose(batch["logp"][:3], logp["now"], atol=1e-6)  # training moved the policy
    now_own = ppo._forward(ppo.params, own.observations)[0][np.arange(8), own.actions]
    assert np.allclose(batch["logp"][3:], now_own, atol=1e-6)  # the version's own: ratio 1 at the start


def test_advantages_follow_each_actors_sequence_among_interleaved_steps():
    a, b = steps(6, 1, seed=1, terminated_last=True), steps(5, 1, seed=2)
    alone = learner(gamma=0.9, gae_lambda=0.8)
    alone.published(1)
    alone.add(a)
    alone.add(b)
    expected = alone._batch(alone.pending, 1, alone.acted)

    mixed = learner(gamma=0.9, gae_lambda=0.8)
    mixed.published(1)
    last = {"a": -1, "b": -1}
    order = []
    for i in range(6):  # a's and b's steps interleaved, each linked to its own actor's previous one
        for name, t in (("a", a), ("b", b)):
            if i < len(t):
                last[name] = one_by_one(mixed, Transitions(*(getattr(t, f)[i : i + 1] for f in
                                                            Transitions.__dataclass_fields__)), last[name])  # fmt: skip
                order.append((name, i))
    got = mixed._batch(mixed.pending, 1, mixed.acted)
    index = {key: n for n, key in enumerate(order)}
    back = [index[("a", i)] for i in range(6)] + [index[("b", i)] for i in range(5)]
    for key in ("adv", "returns", "logp"):
        assert np.allclose(got[key][back], expected[key], atol=1e-5), key
    # b's sequence is cut at its last step (not terminated, no successor yet): it bootstraps from
    # V(next observation); a's terminated last step does not.
    _, values = alone._forward(alone.params, np.concatenate([a.next_observations[-1:], b.next_observations[-1:]]))
    _, v_obs = alone._forward(alone.params, np.concatenate([a.observations[-1:], b.observations[-1:]]))
    assert expected["adv"][5] == pytest.approx(a.rewards[-1] - v_obs[0], abs=1e-5)
    assert expected["adv"][10] == pytest.approx(b.rewards[-1] + 0.9 * values[1] - v_obs[1], abs=1e-5)


def test_a_later_reward_corrects_a_transition_not_yet_trained_on():
    ppo = learner()
    ppo.published(1)
    serial = one_by_one(ppo, steps(3, 1))
    ppo.set_rewards(np.array([serial, 999]), np.array([5.0, 7.0], np.float32))  # 999: never added
    assert ppo.pending[-1][0].rewards[0] == 5.0


async def test_the_learner_service_trains_once_a_poll_completes_the_batch():
    """No wait for the periodic sweep: the records of one poll that complete the version's batch
    start its training, and the next version is published (and told to the learner)."""
    handler = LearnerHandler(
        "ppo", PPOPolicy, {"model": "m", "observation_size": 2, "actions": 2, "hidden": [8], "rollout_steps": 8}
    )
    handler.restored.set()
    published = []

    async def publish(loss, rounds, number=None):
        handler.version = number
        handler._published()
        published.append(number)

    handler._publish = publish
    handler.version = 1
    handler._published()
    one_by_one(handler.learner, steps(7, 1))
    handler.polled()
    assert handler._training is None
    # No batch owed with 7 of 8: the newest version is as trained as it gets (what `trialog train` waits for).
    assert handler.settled_steps() == 7
    one_by_one(handler.learner, steps(2, 1, seed=1))
    assert handler.settled_steps() == -1  # the batch is full: a round is owed
    handler.polled()
    assert handler.settled_steps() == -1  # training, its version not yet published
    await asyncio.wait_for(handler._training, 30)
    assert published == [2] and handler.learner.version == 2 and handler.learner.round_scalars["batch"] == 9
    assert handler.settled_steps() == 9
    scraped = metrics.exposition().decode()
    assert 'trialog_learner_settled_steps{implementation="ppo"} 9.0' in scraped
    assert handler.discarded == handler.learner.discarded == 0
    handler.loop = SimpleNamespace()
    await handler.close()


def test_ppo_policy_draws_each_action_with_its_probability_and_the_same_again():
    """A decision's draw is a function of (trial seed, actor, tick) only — made again, it draws
    the same, as recovery requires — and over many decisions each action comes with the
    probability the policy gives it."""
    learner = PPOLearner(PPOConfig(observation_size=3, actions=5, hidden=(8,)))
    policy = PPOPolicy({"observation_size": 3, "actions": 5, "hidden": [8]})
    policy.pi = unprefixed("pi", learner.tensors())
    me = ActorInfo("agent", "agent", "ppo")
    observations = np.random.default_rng(0).normal(size=(300, 3)) * 4
    requests = [
        DecideRequest(TrialInfo(f"t{i}", seed=i, config={}, actors=(me,), phase="train"), me, i % 7, o)
        for i, o in enumerate(observations)
    ]
    actions = policy.decide_batch(requests)
    assert policy.decide_batch(requests) == actions and len(set(actions)) == 5
    assert policy.decide_batch(requests[::-1]) == actions[::-1]  # each its own draw, not the batch's
    # One row of probabilities, 20,000 decisions (every seed, tick and actor name differing somewhere).
    p = np.array([0.05, 0.15, 0.3, 0.0, 0.5])
    other = ActorInfo("other", "agent", "ppo")
    many = [
        DecideRequest(TrialInfo(f"s{i}", seed=i // 4, config={}, actors=(me, other), phase="train"), a, i % 4, None)
        for i in range(10_000)
        for a in (me, other)
    ]
    counts = np.bincount(sampled_actions(many, np.tile(p, (len(many), 1))), minlength=5)
    assert counts[3] == 0
    assert np.all(np.abs(counts / len(many) - p) < 4 * np.sqrt(p * (1 - p) / len(many)) + 1e-9), counts
    policy.pi = {k: np.full_like(v, np.nan) for k, v in policy.pi.items()}
    with pytest.raises(ValueError, match="not finite"):
        policy.decide_batch(requests[:1])
