"""The environment contract check: run an environment through Trialog's contract
before serving it, and see what would break (in the spirit of PettingZoo's
``parallel_api_test``).

.. code-block:: python

    from trialog.tools.check import check_environment

    report = check_environment(
        "trialog.adapters.pettingzoo:PettingZooEnvironment",
        {"env": "pettingzoo.classic.rps_v2:parallel_env"},
    )
    print(report)               # one line per check, PASS or FAIL with the reason
    report.raise_for_failures()

Each check runs in-process, without Kafka:

- **describe** — every actor class has an observation and an action schema
  (from ``describe(config, actor_class)`` or the ``schemas`` argument) that parse.
- **construct** / **start** — the environment builds from a ``TrialInfo`` and
  ``start()`` returns an observation for every actor.
- **observations** — every observation encodes in its class's schema and decodes
  back equal.
- **update** — ``steps`` ticks of random valid actions (sampled from the action
  space, honouring an ``action_mask`` in the observation); each ``update`` returns
  a ``Step`` with an observation for every actor still in the trial.
- **step types** — ``terminated`` and ``truncated`` are per-actor mappings of
  booleans; rewards are numbers for known actors (or ``RewardOut`` records).
- **end** — ``end()`` returns.
- **determinism** — a second run with the same seed and the same actions gives
  the same observations and rewards (recovery and replay rely on it).

The random actions come from :func:`trialog.protocol.spaces.sample_action`, the
sampler the shipped random actor uses too; ``trialog check`` is
:mod:`trialog.commands.check`.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from trialog.environment import ActorInfo, RewardOut, TrialInfo
from trialog.errors import TrialogError
from trialog.protocol.codec import HEADER_SIZE, Schema, SchemaStore
from trialog.protocol.rewards import reward_bounds_problem
from trialog.protocol.spaces import action_space_of, sample_action

ACTIONS_STREAM = 0xC4EC  # salts the seed of the random actions


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    message: str


@dataclass
class CheckReport:
    """What :func:`check_environment` found: one result per check, in the order run."""

    environment: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if not r.ok]

    def __str__(self) -> str:
        width = max((len(r.name) for r in self.results), default=0)
        lines = [f"Trialog contract check of {self.environment}"]
        lines += [f"  {'PASS' if r.ok else 'FAIL'}  {r.name:<{width}}  {r.message}" for r in self.results]
        failed = len(self.failures)
        lines.append(f"{len(self.results) - failed} passed, {failed} failed" if self.results else "nothing was checked")
        return "\n".join(lines)

    def raise_for_failures(self) -> None:
        if not self.ok:
            raise TrialogError(str(self))


class _Stop(Exception):
    """A check failed that later checks depend on."""


def check_environment(
    entry_or_class: str | type,
    config: Mapping[str, Any] | None = None,
    *,
    actors: Sequence[ActorInfo | str] | Mapping[str, str] | None = None,
    seed: int = 0,
    steps: int = 50,
    schemas: Mapping[str, Mapping[str, Any]] | None = None,
    episodes: int = 1,
) -> CheckReport:
    """Run an environment implementation through Trialog's contract.

    ``actors`` are the trial's actors: ``ActorInfo`` records, names (class
    ``agent``) or a mapping name → actor class; by default the environment's
    ``default_actors(config)`` (the adapters have it). ``schemas`` maps an actor
    class to ``{"observation": ..., "action": ...}`` (and optionally the
    ``"action_space"`` to sample from) for environments without ``describe``.
    ``episodes`` > 1 plays that many episodes in all, each of at most ``steps``
    ticks, with the seeds after ``seed``.
    """
    config = dict(config or {})
    name = (
        entry_or_class
        if isinstance(entry_or_class, str)
        else f"{entry_or_class.__module__}:{entry_or_class.__qualname__}"
    )
    report = CheckReport(name)
    checker = _Checker(report)
    try:
        cls = checker.run("load", lambda: _load(entry_or_class), lambda c: f"{c.__name__}")
        infos = checker.run(
            "actors",
            lambda: _actors(cls, config, actors),
            lambda a: ", ".join(f"{x.name} ({x.actor_class})" for x in a),
        )
        classes = checker.run("describe", lambda: _schemas(cls, config, infos, schemas), _describe_schemas)
        trial = TrialInfo(trial_id="contract-check", seed=seed, config=config, actors=tuple(infos))
        played = _play(checker, cls, trial, classes, steps)
        if played is not None:
            trace, actions = played
            checker.run(
                "determinism",
                lambda: _compare(trace, _replay(cls, trial, classes, actions), seed),
                lambda n: f"{n} ticks replayed with the same seed and actions gave the same observations and rewards",
            )
            if episodes > 1:
                checker.run(
                    "episodes",
                    lambda: _more_episodes(cls, trial, classes, steps, episodes),
                    lambda played: (
                        f"{episodes - 1} more (seeds {seed + 1}–{seed + episodes - 1}): {played[0]} ticks, "
                        f"{played[1]} ended by the environment, every observation in its schema"
                    ),
                )
    except _Stop:
        pass
    return report


def check_spec(
    spec: str | Path, *, environment: str | None = None, seed: int = 0, steps: int = 50, episodes: int = 3
) -> CheckReport:
    """Check an environment implementation of a spec (by default the trial's) as the spec
    sets it up: its config, the spec's trial actors and the actor classes' schemas as the
    spec resolves them (hand-written, or derived: ``auto``), over ``episodes`` episodes."""
    from trialog.spec import load_entry, load_spec

    report = CheckReport(f"spec {spec}")
    try:
        loaded = load_spec(spec)
        name = environment or loaded.trial.environment
        impl = loaded.environments.get(name)
        if impl is None:
            raise TrialogError(f"the spec has no environment {name!r}; it has {', '.join(loaded.environments)}")
        if not impl.served_here:
            raise TrialogError(f"environment {name!r} is external: its own process serves it, not Python code here")
    except TrialogError as exc:
        report.results.append(CheckResult("spec", False, str(exc)))
        return report
    config = {**impl.config, **(loaded.trial.environment_config if name == loaded.trial.environment else {})}
    infos = [
        ActorInfo(a.name, a.actor_class, a.implementation, {**played.config, **a.config}, played.client)
        for a in loaded.trial.actors
        for played in [loaded.actors[a.implementation]]
    ]
    schemas = {}
    for class_name, actor_class in loaded.actor_classes.items():
        given = {
            "observation": json.loads(actor_class.observation_schema),
            "action": json.loads(actor_class.action_schema),
        }
        try:
            action_space_of(given["action"])
        except TrialogError:  # a bare trialog.Tensor carries no space: the environment's describe may say it
            with contextlib.suppress(Exception):
                given["action_space"] = load_entry(impl.entry).describe(config, class_name)["action_space"]
        schemas[class_name] = given
    checked = check_environment(
        impl.entry, config, actors=infos, seed=seed, steps=steps, schemas=schemas, episodes=episodes
    )
    report.environment = f"environment {name!r} ({impl.entry}) of {loaded.file}"
    who = ", ".join(f"{a.name} ({a.actor_class}, {a.implementation})" for a in infos)
    report.results = [CheckResult("spec", True, f"{len(infos)} actors: {who}"), *checked.results]
    return report


# --- the checks ----------------------------------------------------------------


class _Checker:
    def __init__(self, report: CheckReport) -> None:
        self.report = report

    def run(self, name: str, fn: Callable[[], Any], summary: Callable[[Any], str]) -> Any:
        """Run one check; a failure stops the checks that depend on it."""
        try:
            value = fn()
        except Exception as exc:
            self.fail(name, _reason(exc))
            raise _Stop from exc
        self.report.results.append(CheckResult(name, True, summary(value)))
        return value

    def fail(self, name: str, message: str) -> None:
        self.report.results.append(CheckResult(name, False, message))


@dataclass(frozen=True)
class _ClassSchemas:
    """An actor class as the check plays it: the two schemas the environment's ``describe``
    gives (or the caller's ``schemas=``), registered, and the action space random actions are
    drawn from. What :class:`trialog.protocol.trial.ClassSchemas` is to a running trial, less
    what only a spec gives (a default action; the schemas as JSON for user code: the check has
    no spec and no user code to hand them to), plus the action space (which no record carries:
    the check samples actions itself). The actor class's other records: the spec's
    :class:`~trialog.spec.ActorClass` and :class:`~trialog.protocol.events.ActorClassSpec` on
    ``trial.started``."""

    observation: Schema
    action: Schema
    action_space: dict[str, Any]


def _load(entry_or_class: str | type) -> type:
    if not isinstance(entry_or_class, str):
        return entry_or_class
    from trialog.spec import load_entry

    return load_entry(entry_or_class, what="environment")


def _actors(cls: type, config: Mapping[str, Any], actors: Any) -> list[ActorInfo]:
    if actors is None:
        default = getattr(cls, "default_actors", None)
        if default is None:
            raise TrialogError(f"{cls.__name__} has no default_actors(config); pass actors=[...]")
        return list(default(config))
    if isinstance(actors, Mapping):
        return [ActorInfo(name, actor_class, "check") for name, actor_class in actors.items()]
    return [a if isinstance(a, ActorInfo) else ActorInfo(a, "agent", "check") for a in actors]


def _schemas(
    cls: type, config: Mapping[str, Any], actors: Sequence[ActorInfo], given: Mapping[str, Any] | None
) -> dict[str, _ClassSchemas]:
    store = SchemaStore.with_builtin()
    out = {}
    for actor_class in dict.fromkeys(a.actor_class for a in actors):
        if given and actor_class in given:
            described = given[actor_class]
        else:
            try:
                described = cls.describe(config, actor_class)
            except NotImplementedError as exc:
                raise TrialogError(
                    f"no schemas for actor class {actor_class!r}: {cls.__name__}.describe is not implemented; "
                    "pass schemas={...}"
                ) from exc
        observation, action = store.register(described["observation"]), store.register(described["action"])
        space = described.get("action_space") or action_space_of(described["action"])
        out[actor_class] = _ClassSchemas(observation, action, space)
    return out


def _describe_schemas(classes: Mapping[str, _ClassSchemas]) -> str:
    return "; ".join(f"{name}: observation {c.observation.name}, action {c.action.name}" for name, c in classes.items())


Trace = list[tuple[dict[str, bytes], Any]]  # per tick: encoded observations, rewards


def _play(
    checker: _Checker, cls: type, trial: TrialInfo, classes: Mapping[str, _ClassSchemas], steps: int
) -> tuple[Trace, list[dict[str, Any]]] | None:
    """The checked run: random valid actions, every step validated. Returns what
    the determinism check replays, or ``None`` when a check failed on the way."""
    env = checker.run("construct", lambda: cls(trial), lambda e: f"{type(e).__name__} built from a TrialInfo")
    observations = checker.run(
        "start", lambda: _start(env, trial), lambda o: f"an observation for each of {len(o)} actors"
    )
    by_actor = {a.name: classes[a.actor_class] for a in trial.actors}
    trace: Trace = []
    actions: list[dict[str, Any]] = []
    at, failure = ["observations"], None
    try:
        _episode(env, trial, by_actor, observations, steps, trace, actions, at)
    except Exception as exc:  # the user's environment: report whatever it raised
        failure = f"tick {len(actions)}: {_reason(exc)}"
    stage = at[0]
    passed = {
        "observations": "encode in the class schemas and decode back equal",
        "update": f"{len(actions)} ticks of random valid actions",
        "step types": "terminated/truncated map actors to booleans; rewards are finite numbers for known actors",
    }
    for name, summary in passed.items():
        if name == stage and failure:
            checker.fail(name, failure)
        elif not (failure and stage == "observations" and not actions):  # nothing stepped: nothing else to say
            checker.report.results.append(CheckResult(name, True, summary))
    checker.run("end", env.end, lambda _: "end() returned")
    return None if failure else (trace, actions)


def _episode(
    env: Any,
    trial: TrialInfo,
    by_actor: Mapping[str, _ClassSchemas],
    observations: Mapping[str, Any],
    steps: int,
    trace: Trace,
    actions: list[dict[str, Any]],
    stage: list[str],
) -> bool:
    """Play random valid actions from ``start``'s ``observations`` for at most ``steps`` ticks,
    validating every step, into ``trace`` and ``actions``; ``stage[0]`` says which check an
    exception belongs to. Whether the environment ended the episode before ``steps``."""
    # A stream of its own: drawn from the trial's seed alone, the actions would repeat the
    # environment's own draws from that seed (a secret number guessed at the first try).
    rng = np.random.default_rng([trial.seed % 2**63, ACTIONS_STREAM])
    active = set(observations)
    stage[0] = "observations"
    trace.append((_encode(by_actor, 0, observations), None))
    for tick in range(1, steps + 1):
        chosen = {a: sample_action(by_actor[a].action_space, rng, observations.get(a)) for a in sorted(active)}
        stage[0] = "update"
        step = env.update(chosen)
        actions.append(chosen)
        stage[0] = "step types"
        _check_step(step, trial, active)
        stage[0] = "observations"
        trace.append((_encode(by_actor, tick, step.observations), _rewards(step.rewards)))
        observations = {**observations, **step.observations}
        active -= {a for a in active if step.terminated.get(a) or step.truncated.get(a)}
        if step.done or not active:
            return True
    return False


def _more_episodes(
    cls: type, trial: TrialInfo, classes: Mapping[str, _ClassSchemas], steps: int, episodes: int
) -> tuple[int, int]:
    """Episodes 2 … ``episodes``, seeds following the first's, checked as the first was.
    Returns the ticks played and how many episodes the environment ended."""
    by_actor = {a.name: classes[a.actor_class] for a in trial.actors}
    ticks = ended = 0
    for episode in range(2, episodes + 1):
        seeded = replace(trial, seed=trial.seed + episode - 1, trial_id=f"contract-check-{episode}")
        env = cls(seeded)
        actions: list[dict[str, Any]] = []
        stage = ["start"]
        try:
            ended += _episode(env, seeded, by_actor, _start(env, seeded), steps, [], actions, stage)
        except Exception as exc:  # the user's environment: report whatever it raised
            raise TrialogError(
                f"episode {episode} (seed {seeded.seed}), tick {len(actions)}, {stage[0]}: {_reason(exc)}"
            ) from exc
        finally:
            env.end()
        ticks += len(actions)
    return ticks, ended


def _replay(cls: type, trial: TrialInfo, classes: Mapping[str, _ClassSchemas], actions: list[dict[str, Any]]) -> Trace:
    by_actor = {a.name: classes[a.actor_class] for a in trial.actors}
    env = cls(trial)
    trace: Trace = [(_encode(by_actor, 0, env.start()), None)]
    for tick, chosen in enumerate(actions, start=1):
        step = env.update(chosen)
        trace.append((_encode(by_actor, tick, step.observations), _rewards(step.rewards)))
    env.end()
    return trace


def _start(env: Any, trial: TrialInfo) -> Mapping[str, Any]:
    observations = env.start()
    if not isinstance(observations, Mapping):
        raise TrialogError(f"start() returned a {type(observations).__name__}, not a mapping actor name → observation")
    missing = sorted(set(trial.actor_names) - set(observations))
    unknown = sorted(set(observations) - set(trial.actor_names))
    if missing or unknown:
        raise TrialogError(f"start() must return one observation per actor; missing: {missing}, unknown: {unknown}")
    return observations


def _encode(classes: Mapping[str, _ClassSchemas], tick: int, observations: Mapping[str, Any]) -> dict[str, bytes]:
    out = {}
    for actor, value in observations.items():
        schema = classes[actor].observation
        try:
            data = schema.encode(value)
        except Exception as exc:
            raise TrialogError(
                f"the observation of {actor!r} does not encode as {schema.name}: {_reason(exc)}"
            ) from exc
        back = schema.decode_body(data, HEADER_SIZE)
        if not _same(back, value):
            raise TrialogError(
                f"the observation of {actor!r} decodes to something else than it was ({_short(value)} → {_short(back)})"
            )
        out[actor] = data
    return out


def _check_step(step: Any, trial: TrialInfo, active: set[str]) -> None:
    names = set(trial.actor_names)
    for attr in ("observations", "rewards", "terminated", "truncated", "done"):
        if not hasattr(step, attr):
            raise TrialogError(
                f"update() returned a {type(step).__name__} without {attr!r}; return trialog.environment.Step"
            )
    missing = sorted(a for a in active if a not in step.observations)
    if missing:
        raise TrialogError(f"update() gave no observation to {missing}, who are still in the trial")
    for attr in ("terminated", "truncated"):
        flags = getattr(step, attr)
        if not isinstance(flags, Mapping):
            raise TrialogError(f"Step.{attr} is a {type(flags).__name__}; it must map actor names to booleans")
        bad = {k: v for k, v in flags.items() if k not in names or not isinstance(v, (bool, np.bool_))}
        if bad:
            raise TrialogError(f"Step.{attr} must map actor names to booleans; wrong entries: {bad}")
    receivers = names | {"*"} | {f"{a.actor_class}.*" for a in trial.actors}
    rewards = step.rewards
    triples = (
        rewards.items()
        if isinstance(rewards, Mapping)
        else [(r.receiver, r.value, r.confidence) for r in rewards if isinstance(r, RewardOut)]
    )
    if not isinstance(rewards, Mapping) and any(not isinstance(r, RewardOut) for r in rewards):
        raise TrialogError("Step.rewards must be a mapping actor → number or a sequence of RewardOut")
    for receiver, value, *confidence in triples:
        if receiver not in receivers:
            raise TrialogError(f"a reward goes to {receiver!r}, who is not an actor of the trial")
        if not isinstance(value, (int, float, np.number)) or not math.isfinite(float(value)):
            raise TrialogError(f"the reward of {receiver!r} is {value!r}, not a finite number")
        problem = reward_bounds_problem(float(value), float(confidence[0]) if confidence else 1.0)
        if problem is not None:
            raise TrialogError(f"the reward of {receiver!r} cannot count: {problem}")


def _rewards(rewards: Any) -> Any:
    if isinstance(rewards, Mapping):
        return sorted((k, float(v)) for k, v in rewards.items())
    return [(r.receiver, float(r.value), float(r.confidence), r.source) for r in rewards]


def _compare(first: Trace, again: Trace, seed: int) -> int:
    for tick, ((obs_a, rew_a), (obs_b, rew_b)) in enumerate(zip(first, again, strict=True)):
        for actor in sorted(set(obs_a) | set(obs_b)):
            if obs_a.get(actor) != obs_b.get(actor):
                raise TrialogError(
                    f"tick {tick}: the observation of {actor!r} differs between two runs with seed {seed}; "
                    "keep all randomness behind trial.seed"
                )
        if rew_a != rew_b:
            raise TrialogError(f"tick {tick}: rewards differ between two runs with seed {seed}: {rew_a} vs {rew_b}")
    return len(first) - 1


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if not isinstance(exc, TrialogError) else str(exc)
