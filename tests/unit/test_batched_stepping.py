"""Batched environment stepping (``Environment.update_batch``): the runtime steps the trials
a poll completes in one call, and each trial gets what it would have got alone — the same
bytes in the log, its own failure, replay by ``update`` alone (``replay --verify``)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import yaml

from tests.harness import deployment
from trialog.bus.memory import MemoryBus
from trialog.datalog.replay import read_trial
from trialog.datalog.verify import verify
from trialog.environment import ActorInfo, Environment, Step, TrialInfo, steps_in_batches, update_together
from trialog.examples.rps.game import RockPaperScissors
from trialog.spec import parse_spec

SPEC = Path(__file__).resolve().parents[1] / "integration" / "trialtest.yaml"
HERE = "tests.unit.test_batched_stepping"
FAILING_SEED, FAILING_ROUND = 13, 3


class NoisyRps(RockPaperScissors):
    """Rock-paper-scissors with a seeded random bonus on every reward (so that a trial stepped
    with another trial's randomness shows), failing at one round for one seed."""

    def start(self):
        self.rng = random.Random(self.trial.seed)
        return super().start()

    def update(self, actions):
        if self.trial.seed == FAILING_SEED and self.round == FAILING_ROUND:
            raise RuntimeError("boom")
        step = super().update(actions)
        bonus = round(self.rng.random(), 3)
        return Step(
            step.observations,
            {a: r + bonus for a, r in step.rewards.items()},
            step.terminated,
            step.truncated,
            step.done,
        )


class BatchedRps(NoisyRps):
    """The same game stepped in batches; each call's size is kept, and a batch holding the
    trial that fails raises before changing any trial (as update_batch must)."""

    sizes: list[int] = []
    raised: list[int] = []

    @classmethod
    def update_batch(cls, envs, actions):
        cls.sizes.append(len(envs))
        if any(e.trial.seed == FAILING_SEED and e.round == FAILING_ROUND for e in envs):
            cls.raised.append(len(envs))
            raise RuntimeError("one trial of the batch cannot step")
        return [env.update(a) for env, a in zip(envs, actions)]


def players() -> tuple[ActorInfo, ...]:
    return (ActorInfo("alice", "player", "random"), ActorInfo("bob", "player", "counter"))


def spec_for(bus, **trial):
    raw = yaml.safe_load(SPEC.read_text())
    raw["name"] = "batched"
    raw["environments"] = {
        "alone": {"entry": f"{HERE}:NoisyRps", "config": {"target_score": 1000}},
        "batched": {"entry": f"{HERE}:BatchedRps", "config": {"target_score": 1000}},
    }
    raw["trial"].update(environment="batched", max_ticks=12, **trial)
    return parse_spec(raw, file=str(SPEC), base_dir=SPEC.parent, store=bus.store)


async def run_trials(bus, spec, environment: str, seeds: list[int]) -> dict[int, tuple]:
    """Start one trial per seed at once; per seed: its end and its log (observation payloads
    and environment rewards by tick)."""
    async with deployment(bus, spec) as (_, ctl):
        ids = {seed: await ctl.start_trial("batched", seed=seed, environment=environment) for seed in seeds}
        ends = {seed: await ctl.wait_ended(tid, timeout=60) for seed, tid in ids.items()}
        folds = {seed: await read_trial(bus, tid) for seed, tid in ids.items()}
    out = {}
    for seed, fold in folds.items():
        samples = fold.samples()
        observations = {(s.tick, s.actor): s.observation_avro for s in samples}
        rewards = {(s.tick, s.actor): s.reward for s in samples}
        out[seed] = (ends[seed], observations, rewards, fold)
    return out


def test_only_an_override_batches():
    assert steps_in_batches(BatchedRps)
    assert not steps_in_batches(NoisyRps) and not steps_in_batches(Environment)


def test_a_batch_that_raises_is_stepped_trial_by_trial_and_only_the_failing_trial_fails():
    def env(seed: int) -> BatchedRps:
        e = BatchedRps(TrialInfo(f"t{seed}", seed, {}, players()))
        e.start()
        for _ in range(FAILING_ROUND):
            e.update({"alice": "ROCK", "bob": "PAPER"})
        return e

    envs = [env(1), env(FAILING_SEED), env(2)]
    twins = [env(1), env(2)]
    results, failed = update_together(BatchedRps, envs, [{"alice": "ROCK", "bob": "PAPER"}] * 3)
    assert "one trial of the batch cannot step" in failed
    assert [step is None for step, _ in results] == [False, True, False]
    assert results[1][1] == "RuntimeError: boom"
    # The others were stepped once, as alone: the same rewards as twins stepped one by one.
    for (step, _), twin in zip([results[0], results[2]], twins):
        assert step.rewards == twin.update({"alice": "ROCK", "bob": "PAPER"}).rewards
    assert envs[0].round == envs[2].round == FAILING_ROUND + 1


def test_update_together_refuses_a_wrong_number_of_steps():
    class Short(NoisyRps):
        @classmethod
        def update_batch(cls, envs, actions):
            return []

    e = Short(TrialInfo("t", 1, {}, players()))
    e.start()
    results, failed = update_together(Short, [e], [{"alice": "ROCK", "bob": "PAPER"}])
    assert "must return 1" in failed and results[0][0] is not None and e.round == 1


async def test_batched_trials_log_what_they_log_alone_and_replay_alone(memory_settings):
    seeds = [1, 2, 3, 4, 5, 6, 7, 8]
    BatchedRps.sizes.clear()
    bus = MemoryBus(memory_settings)
    batched = await run_trials(bus, spec_for(bus), "batched", seeds)
    assert max(BatchedRps.sizes) > 1, f"no batch of more than one trial: {BatchedRps.sizes}"
    bus = MemoryBus(memory_settings)
    spec = spec_for(bus)
    alone = await run_trials(bus, spec, "alone", seeds)
    for seed in seeds:
        end, observations, rewards, fold = batched[seed]
        assert end.reason == "max_ticks" and end.tick == 12
        assert observations == alone[seed][1], f"seed {seed}: observations differ from the trial stepped alone"
        assert rewards == alone[seed][2], f"seed {seed}: rewards differ from the trial stepped alone"
        assert len(observations) == 2 * 13
        # replay --verify steps the trial alone, through update: the same bytes.
        assert verify(fold.started, fold.samples(), bus.store, spec).ok


async def test_a_failing_trial_in_a_batch_ends_alone(memory_settings):
    seeds = [FAILING_SEED, 21, 22, 23, 24, 25]
    BatchedRps.raised.clear()
    bus = MemoryBus(memory_settings)
    out = await run_trials(bus, spec_for(bus), "batched", seeds)
    failing = out[FAILING_SEED][0]
    assert failing.reason == "error" and "boom" in failing.details and failing.tick == FAILING_ROUND
    assert BatchedRps.raised, "the failing trial never reached update_batch"
    for seed in seeds[1:]:
        end, observations, *_ = out[seed]
        assert end.reason == "max_ticks" and end.tick == 12, (seed, end)
        assert len(observations) == 2 * 13


async def test_real_time_trials_step_in_batches_at_their_deadlines(memory_settings):
    BatchedRps.sizes.clear()
    bus = MemoryBus(memory_settings)
    spec = spec_for(bus, tick_interval_ms=40, response_timeout_ms=10)
    async with deployment(bus, spec) as (_, ctl):
        ids = [await ctl.start_trial("batched", seed=seed, max_ticks=5) for seed in (31, 32, 33)]
        ends = await asyncio.gather(*(ctl.wait_ended(tid, timeout=30) for tid in ids))
        folds = [await read_trial(bus, tid) for tid in ids]
    assert [(e.reason, e.tick) for e in ends] == [("max_ticks", 5)] * 3
    assert sum(BatchedRps.sizes) == 3 * 5  # every step went through update_batch
    for fold in folds:
        assert verify(fold.started, fold.samples(), bus.store, spec).ok
        assert sorted({s.tick for s in fold.samples()}) == list(range(6))
