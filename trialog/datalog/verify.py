"""Re-simulation: replay a trial's logged actions through a fresh environment.

The environment contract says the same seed, config and actions give the same
observations and rewards; recovery (I-7) relies on it. :func:`verify` checks it
for one logged trial: it builds the environment the trial names *from a local
spec* (the one the environment service runs: a record never names code to import,
I-9) with the seed and config in ``trial.started``, feeds it the logged actions tick by tick (the default action
where the log says an actor timed out), and compares what it returns with what
was logged — observations byte for byte in their Avro encoding, and the
environment's own rewards (senders ``env`` and ``env/<source>``). Rewards from
other senders are not the environment's business and are not compared.

Logged parameter changes (``parameters.changed``) are replayed as the runtime
applied them: before the update of the tick the fold worked out for each
(:attr:`trialog.datalog.samples.TrialFold.parameter_changes`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trialog.datalog.samples import Sample
from trialog.environment import RewardOut, Step
from trialog.errors import TrialogError
from trialog.protocol.codec import SchemaStore
from trialog.protocol.events import TrialStarted
from trialog.protocol.trial import class_schemas, operator_code, trial_info
from trialog.spec import Spec, load_entry


@dataclass(frozen=True)
class Verdict:
    ok: bool
    ticks: int  # ticks compared
    tick: int | None = None  # the first tick that differs
    details: str = ""

    def __str__(self) -> str:
        if self.ok:
            return f"deterministic: {self.ticks} tick(s) re-simulated, observations and environment rewards identical"
        return f"differs at tick {self.tick}: {self.details}"


def _env_rewards(samples: Sequence[Sample]) -> set[tuple[str, str, float, float]]:
    return {
        (r.sender, r.receiver, r.value, r.confidence)
        for s in samples
        for r in s.reward_sources
        if r.sender == "env" or r.sender.startswith("env/")
    }


def _step_rewards(rewards: Mapping[str, float] | Sequence[RewardOut]) -> set[tuple[str, str, float, float]]:
    items = (
        [RewardOut(name, value) for name, value in rewards.items()] if isinstance(rewards, Mapping) else list(rewards)
    )
    return {(f"env/{r.source}" if r.source else "env", r.receiver, float(r.value), float(r.confidence)) for r in items}


def verify(
    started: TrialStarted,
    samples: Sequence[Sample],
    store: SchemaStore,
    spec: Spec,
    parameter_changes: Sequence[tuple[int, Mapping]] = (),
) -> Verdict:
    """Re-simulate a trial from its ``trial.started`` and samples, with the environment
    implementation of that name in ``spec`` (never the entry point the record carries),
    applying ``parameter_changes`` ((tick before whose update, parameters), as folded)."""
    if started.spec != spec.name:
        raise TrialogError(
            f"the trial ran spec {started.spec!r}, not {spec.name!r} ({spec.file}): pass the spec it ran"
        )
    impl = spec.environments.get(started.environment)
    if impl is None or not impl.entry:
        raise TrialogError(
            f"{spec.file} declares no environment {started.environment!r} with an entry to re-simulate it with"
        )
    by_tick: dict[int, dict[str, Sample]] = defaultdict(dict)
    for s in samples:
        by_tick[s.tick][s.actor] = s
    if not by_tick:
        return Verdict(False, 0, 0, "the trial has no samples")
    schemas = class_schemas(store, started)
    classes = {a.name: a.actor_class for a in started.actors}
    factory = load_entry(impl.entry, what=f"environment {started.environment}")
    env: Any = factory(operator_code(trial_info(started), factory, spec.operator_config(started.environment)))
    try:
        compared = 0
        observations = env.start()
        last = max(by_tick)
        for tick in range(last + 1):
            logged = by_tick.get(tick, {})
            for actor, sample in sorted(logged.items()):
                if actor not in observations:
                    return Verdict(False, compared, tick, f"the environment gave no observation for {actor}")
                if schemas[classes[actor]].observation.encode(observations[actor]) != sample.observation_avro:
                    return Verdict(
                        False,
                        compared,
                        tick,
                        f"observation of {actor}: logged {sample.observation!r}, re-simulated {observations[actor]!r}",
                    )
            compared += 1
            actions = {a: s.action for a, s in logged.items() if s.action_avro is not None}
            if not actions:
                break  # the final tick (or everyone left): nothing more was computed
            for at, parameters in parameter_changes:
                if at == tick:
                    env.set_parameters(parameters)
            step = env.update(actions)
            if not isinstance(step, Step):
                return Verdict(False, compared, tick, f"update returned {type(step).__name__}, not Step")
            want, got = _env_rewards(list(logged.values())), _step_rewards(step.rewards)
            if want != got:
                return Verdict(
                    False, compared, tick, f"environment rewards: logged {sorted(want)}, re-simulated {sorted(got)}"
                )
            observations = step.observations
        return Verdict(True, compared)
    finally:
        env.end()
