"""Turning a start request into a fully resolved trial (the spec's defaults, the
request's overrides, then the pre-trial hooks), or a reason to reject it."""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from trialog.errors import SpecError, TrialError
from trialog.protocol.events import StartRequest, TrialStarted, trial_id_problem
from trialog.spec import ActorDefault, Implementation, Spec, SpecReader, load_entry, parse_actor_list


@dataclass
class TrialDraft:
    """What a pre-trial hook receives and may change (or replace) before the trial starts.

    A hook is ``def hook(draft: TrialDraft) -> TrialDraft | None`` named in the spec's
    ``trial.pre_trial_hooks``; returning None keeps the (possibly mutated) draft.
    Raising rejects the start request with the exception's message.
    """

    trial_id: str
    environment: str
    environment_config: dict[str, Any]
    actors: list[ActorDefault]
    seed: int
    max_ticks: int | None
    parameters: dict[str, Any] = field(default_factory=dict)
    experiment: str = ""
    phase: str = ""

    def set_implementation(self, actor: str, implementation: str) -> None:
        for i, a in enumerate(self.actors):
            if a.name == actor:
                self.actors[i] = dataclasses.replace(a, implementation=implementation)
                return
        raise TrialError(f"no actor named {actor!r} in this trial")


def default_seed(trial_id: str) -> int:
    """A trial without a seed gets one derived from its ID, so it is reproducible."""
    return zlib.crc32(trial_id.encode())


def resolve(spec: Spec, request: StartRequest) -> TrialStarted:
    """Raise :class:`TrialError` (with the reason) when the request cannot be honoured."""
    t = spec.trial
    problem = trial_id_problem(request.trial_id)
    if problem:
        raise TrialError(problem)
    try:
        env = request.environment or t.environment
        if env not in spec.environments:
            raise TrialError(
                f"unknown environment implementation {env!r}; the spec declares {', '.join(spec.environments)}"
            )
        requested_config = _json_object(request.environment_config, "environment_config")
        _check_overrides(requested_config, spec.environments[env], f"environment {env}")
        env_config = {**spec.environments[env].config, **t.environment_config, **requested_config}
        if request.actors:
            reader = SpecReader("<start request>")
            actors = list(parse_actor_list(reader, orjson.loads(request.actors), "actors", spec.actors))
            for a in actors:
                _check_overrides(a.config, spec.actors[a.implementation], f"actor {a.name} ({a.implementation})")
        else:
            actors = list(t.actors)
        draft = TrialDraft(
            trial_id=request.trial_id,
            environment=env,
            environment_config=env_config,
            actors=actors,
            seed=request.seed
            if request.seed is not None
            else (t.seed if t.seed is not None else default_seed(request.trial_id)),
            max_ticks=request.max_ticks if request.max_ticks is not None else t.max_ticks,
            parameters={**t.parameters, **_json_object(request.parameters, "parameters")},
            experiment=request.experiment,
            phase=request.phase,
        )
        for name, impl in request.implementations.items():
            draft.set_implementation(name, impl)
        for hook_path in t.pre_trial_hooks:
            hook = load_entry(hook_path, what="pre-trial hook")
            try:
                draft = hook(draft) or draft
            except TrialError:
                raise
            except Exception as exc:
                raise TrialError(f"pre-trial hook {hook_path} refused the trial: {type(exc).__name__}: {exc}") from exc
        return _finalize(spec, draft)
    except SpecError as exc:
        raise TrialError(str(exc)) from exc
    except orjson.JSONDecodeError as exc:
        raise TrialError(f"malformed JSON in the start request: {exc}") from exc


def _finalize(spec: Spec, d: TrialDraft) -> TrialStarted:
    t = spec.trial
    if d.max_ticks is not None and d.max_ticks < 1:
        raise TrialError(f"max_ticks must be at least 1, got {d.max_ticks}")
    actor_specs = []
    for a in d.actors:
        if a.implementation not in spec.actors:
            raise TrialError(
                f"actor {a.name}: unknown implementation {a.implementation!r}; "
                f"the spec declares {', '.join(spec.actors)}"
            )
        if a.actor_class not in spec.actor_classes:
            raise TrialError(f"actor {a.name}: unknown actor class {a.actor_class!r}")
        impl = spec.actors[a.implementation]
        if impl.classes and a.actor_class not in impl.classes:
            raise TrialError(
                f"actor {a.name}: implementation {a.implementation!r} does not play class {a.actor_class!r}"
            )
        actor_specs.append(a.wire(impl))
    used = {a.actor_class for a in d.actors}
    classes = tuple(c.wire() for c in spec.actor_classes.values() if c.name in used)
    return TrialStarted(
        d.trial_id,
        spec=spec.name,
        environment=d.environment,
        environment_entry=spec.environments[d.environment].entry,
        environment_config=orjson.dumps(d.environment_config).decode(),
        actors=tuple(actor_specs),
        actor_classes=classes,
        seed=int(d.seed),
        max_ticks=d.max_ticks,
        response_timeout_ms=t.response_timeout_ms,
        timeout_policy=t.timeout_policy,
        inactivity_timeout_ms=t.inactivity_timeout_ms,
        wall_clock_limit_ms=t.wall_clock_limit_ms,
        join_timeout_ms=t.join_timeout_ms,
        parameters=orjson.dumps(d.parameters).decode(),
        experiment=d.experiment,
        phase=d.phase,
        tick_interval_ms=t.tick_interval_ms,
    )


def _check_overrides(config: Mapping[str, Any], impl: Implementation, what: str) -> None:
    """A start request sets only the config keys the spec lets it (I-9: a request names no code)."""
    refused = sorted(set(config) - set(impl.overridable))
    if refused:
        allowed = ", ".join(impl.overridable) or "none"
        raise TrialError(
            f"the start request may not set {', '.join(refused)} of {what}'s config; the spec allows {allowed} "
            f"(an operator lists keys under `overridable:` of the implementation)"
        )


def _json_object(text: str | None, what: str) -> dict[str, Any]:
    if not text:
        return {}
    value = orjson.loads(text)
    if not isinstance(value, dict):
        raise TrialError(f"{what} must be a JSON object")
    return value
