"""Curricula: a preset trained in **stages**, each with other partners (Cogment's §2.1).

"Bootstrap with pseudo-humans: rule-based agents simulating humans, run many simulated
trials; once the AI agents are good enough, start involving the actual humans." A
:class:`Curriculum` is a preset whose learning implementation goes through stages in turn;
each :class:`Stage` names

- the **partners**: the implementation playing each of the trial's other actors, or a pool
  of implementations with weights, drawn per trial from its seed (the same draw in both
  modes);
- its own **schedule** (heatup, steps between evaluations, evaluation trials, budget,
  trials at once) — the learner and its model go on from the stage before;
- a **validation** rule to move on: the stage ends at its first evaluation whose mean return
  reaches ``min_reward_threshold``, else when its budget is spent.

Every trial records its stage in its parameters (``{"stage": NAME}`` on ``trial.started``,
beside the experiment and the phase). Partner models a stage plays (a behaviour clone of
the planner, say) are made before the stages by the functions in ``models`` and published
to ``models`` (through the log) or loaded into the partner's policy (``--in-process``).
After the last stage, ``baseline`` (an implementation, e.g. ``random``) plays the learning
actors in the last evaluation's trials again, with the same seeds and partners: what the
training bought. ``summary.json`` adds ``stages`` (per stage: env steps, evaluations, whether
its rule was met) and ``baseline``.

``trialog train`` runs the stages through the log and ``trialog train --in-process`` in one
process, with the same trials, seeds and draws.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trialog.errors import SpecError, TrialogError
from trialog.learn.train import Evaluation, Preset, Schedule, TrainResult, Validation, played_actors

STAGE = "stage"  # the trial parameter naming its stage


@dataclass(frozen=True)
class Stage:
    name: str
    # actor → implementation, or actor → {implementation: weight} (a pool drawn from per trial)
    partners: Mapping[str, str | Mapping[str, float]]
    schedule: Schedule
    validation: Validation | None = None  # move on at the first evaluation meeting it; else at the budget's end

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TrialogError(f"stage name must be a non-empty string, not {self.name!r}")
        if not isinstance(self.schedule, Schedule):
            raise TrialogError(f"stage {self.name}: schedule must be a Schedule, not {type(self.schedule).__name__}")
        if not isinstance(self.partners, Mapping):
            raise TrialogError(f"stage {self.name}: partners must map actor names to implementations (or pools)")
        for actor, pool in self.partners.items():
            if isinstance(pool, str):
                continue
            if not isinstance(pool, Mapping) or not pool:
                raise TrialogError(
                    f"stage {self.name}: partner {actor!r} must be an implementation or a non-empty "
                    f"{{implementation: weight}} pool, not {pool!r}"
                )
            bad = {i: w for i, w in pool.items() if isinstance(w, bool) or not isinstance(w, int | float) or w <= 0}
            if bad:
                raise TrialogError(f"stage {self.name}: partner {actor!r}: weights must be positive numbers, not {bad}")

    def pool(self, actor: str) -> dict[str, float]:
        chosen = self.partners[actor]
        return {chosen: 1.0} if isinstance(chosen, str) else {i: float(w) for i, w in chosen.items()}

    def draw(self, seed: int) -> dict[str, str]:
        """Each partner's implementation for the trial of ``seed``: from its pool, by weight,
        with draws seeded by (seed, actor) — the same in both modes and on a rerun."""
        out = {}
        for actor in sorted(self.partners):
            pool = self.pool(actor)
            names = sorted(pool)
            weights = np.array([pool[n] for n in names])
            rng = np.random.default_rng([seed % 2**63, zlib.crc32(actor.encode())])
            out[actor] = names[int(rng.choice(len(names), p=weights / weights.sum()))]
        return out


# name → function(spec) -> (algorithm, tensors, metadata): a partner's model, made before the stages
ModelMaker = Callable[[Any], tuple[str, Mapping[str, np.ndarray], Mapping[str, Any]]]


@dataclass(frozen=True)
class Curriculum(Preset):
    stages: tuple[Stage, ...] = ()
    models: Mapping[str, ModelMaker] = field(default_factory=dict)
    baseline: str = ""  # an implementation replaying the last evaluation's trials in the learner's seats
    stage: str = ""  # the stage whose trials start (set by the run; "baseline" for the baseline's)

    def __post_init__(self) -> None:
        if not self.stages or not all(isinstance(s, Stage) for s in self.stages):
            raise TrialogError(f"curriculum {self.name}: stages must be a non-empty tuple of Stage")
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names) or STAGE_BASELINE in names:
            raise TrialogError(
                f"curriculum {self.name}: stage names must be unique and not {STAGE_BASELINE!r}: {names}"
            )
        if self.stage and self.stage not in (*names, STAGE_BASELINE):
            raise TrialogError(f"curriculum {self.name}: no stage {self.stage!r}")
        # The preset's schedule says what the whole runs: the stages' budgets summed. A schedule of
        # another total given in its place (``--total-steps``) is shared among the stages as their budgets are.
        given, whole = self.schedule, sum(s.schedule.total_steps for s in self.stages)
        if given not in (Schedule(), _summed(self.stages)) and given.total_steps != whole:
            if given.total_steps < len(self.stages):
                raise TrialogError(
                    f"curriculum {self.name}: total_steps must be at least {len(self.stages)} (one a stage), "
                    f"not {given.total_steps}"
                )
            object.__setattr__(self, "stages", tuple(_share(s, given.total_steps, whole) for s in self.stages))
        object.__setattr__(self, "schedule", _summed(self.stages))
        object.__setattr__(self, "validation", self.stages[-1].validation)  # valid: the last stage's rule held

    def partners_of(self, spec) -> dict[str, tuple[str, ...]]:
        """Every implementation any stage may give each actor (the services host them all), the
        stages checked against the spec first (:func:`check`): a bad stage fails before any trial."""
        check(self, spec)
        out: dict[str, set[str]] = {}
        for s in self.stages:
            for actor in s.partners:
                out.setdefault(actor, set()).update(s.pool(actor))
        if self.baseline:
            for actor in self.actors:
                out.setdefault(actor, set()).add(self.baseline)
        return {a: tuple(sorted(i)) for a, i in out.items()}

    def current(self) -> Stage:
        return next((s for s in self.stages if s.name == self.stage), self.stages[-1])

    def trial_setup(self, played: Mapping[str, str], seed: int) -> dict[str, Any]:
        stage = self.current()
        learners = {a: self.baseline for a in played} if self.stage == STAGE_BASELINE else dict(played)
        return {"implementations": {**learners, **stage.draw(seed)}, "parameters": {STAGE: self.stage or stage.name}}

    def of_stage(self, stage: Stage, seed: int, episodes: int) -> Curriculum:
        """The preset as one stage runs it: its schedule, its rule (stopping at the first evaluation
        that meets it, the trials' episodes counted from the run's start), seeds going on."""
        rule = stage.validation
        if rule is not None and rule.max_episodes_to_achieve_reward is not None:
            rule = dataclasses.replace(
                rule, max_episodes_to_achieve_reward=episodes + rule.max_episodes_to_achieve_reward
            )
        return _with(
            self,
            stage=stage.name,
            schedule=stage.schedule,
            validation=rule,
            seed=seed,
            stop_when_valid=rule is not None,
        )

    async def run(self, phases, settings, spec, **kwargs) -> TrainResult:
        return await run_stages_through_log(phases, settings, self, spec, **kwargs)

    def run_in_process(self, run) -> TrainResult:
        return run_stages_in_process(run)


STAGE_BASELINE = "baseline"


def _summed(stages: tuple[Stage, ...]) -> Schedule:
    return Schedule(
        heatup_steps=stages[0].schedule.heatup_steps,
        steps_between_evaluations=min(x.schedule.steps_between_evaluations for x in stages),
        evaluation_trials=max(x.schedule.evaluation_trials for x in stages),
        total_steps=sum(x.schedule.total_steps for x in stages),
        concurrency=max(x.schedule.concurrency for x in stages),
    )


def _share(stage: Stage, total_steps: int, whole: int) -> Stage:
    """The stage with its part of ``total_steps`` (as its budget is of ``whole``) for its budget."""
    budget = max(1, total_steps * stage.schedule.total_steps // whole)
    schedule = dataclasses.replace(
        stage.schedule,
        total_steps=budget,
        heatup_steps=min(stage.schedule.heatup_steps, budget),
        steps_between_evaluations=min(stage.schedule.steps_between_evaluations, budget),
    )
    return dataclasses.replace(stage, schedule=schedule)


def _with(preset: Curriculum, **changes: Any) -> Curriculum:
    """``dataclasses.replace`` keeping a stage's schedule and rule (``__post_init__`` would sum them again)."""
    out = dataclasses.replace(preset, **{k: v for k, v in changes.items() if k not in ("schedule", "validation")})
    for k in ("schedule", "validation"):
        if k in changes:
            object.__setattr__(out, k, changes[k])
    return out


def check(preset: Curriculum, spec) -> None:
    """The stages against the spec: partners are actors of the trial the learner does not play,
    played by implementations the spec declares for their class."""
    played = played_actors(preset, spec)
    actors = {a.name: a.actor_class for a in spec.trial.actors}
    for s in preset.stages:
        for actor in s.partners:
            if actor not in actors:
                raise SpecError(
                    f"curriculum {preset.name}, stage {s.name}: no actor {actor!r} in the trial "
                    f"(its actors: {', '.join(actors)})",
                    file=spec.file,
                )
            if actor in played:
                raise SpecError(
                    f"curriculum {preset.name}, stage {s.name}: {actor!r} is played by the learning "
                    f"implementation {preset.implementation!r}; name the actors it plays (`actors=`)",
                    file=spec.file,
                )
            for impl in s.pool(actor):
                declared = spec.actors.get(impl)
                if declared is None:
                    raise SpecError(
                        f"curriculum {preset.name}, stage {s.name}: {actor!r}'s partner {impl!r} is no actor "
                        f"implementation of the spec ({', '.join(spec.actors)})",
                        file=spec.file,
                    )
                if declared.external:  # people (client seats) may be partners: they play through the gateway
                    raise SpecError(
                        f"curriculum {preset.name}, stage {s.name}: {actor!r}'s partner {impl!r} is an external "
                        "implementation: stages take Trialog's own agents and policies, and people (client seats)",
                        file=spec.file,
                    )
                if declared.classes and actors[actor] not in declared.classes:
                    raise SpecError(
                        f"curriculum {preset.name}, stage {s.name}: {impl!r} does not play class {actors[actor]!r}",
                        file=spec.file,
                    )
    if preset.baseline and preset.baseline not in spec.actors:
        raise SpecError(f"curriculum {preset.name}: baseline {preset.baseline!r} is not in the spec", file=spec.file)


# --- the result -----------------------------------------------------------------------------------------------


@dataclass
class CurriculumResult(TrainResult):
    stages: list[dict[str, Any]] = field(default_factory=list)
    baseline: dict[str, Any] | None = None
    models: dict[str, dict[str, Any]] = field(default_factory=dict)  # partner models made: version, metadata

    @property
    def summary_fields(self) -> dict[str, Any]:  # what summary.json adds for a curriculum
        return {"stages": self.stages, "baseline": self.baseline, "partner_models": self.models}


def _stage_record(stage: Stage, before: TrainResult, after: TrainResult, seconds: float) -> dict[str, Any]:
    rule = stage.validation
    met = None if rule is None else after.valid
    return {
        "name": stage.name,
        "partners": {a: stage.pool(a) for a in stage.partners},
        "env_steps": after.env_steps - before.env_steps,
        "episodes": after.episodes - before.episodes,
        "evaluations": [[e.env_steps, e.mean_return] for e in after.evaluations],
        "rule": dataclasses.asdict(rule) if rule else None,
        "met": met,
        "ended_by": "rule" if met else "budget",
        "wall_s": round(seconds, 3),
    }


def _carry(result: TrainResult) -> TrainResult:
    """A fresh result for the next stage: the run's counters, no evaluations of its own yet."""
    return TrainResult(env_steps=result.env_steps, episodes=result.episodes, mode=result.mode)


def _trials_started(result: CurriculumResult) -> int:
    return result.episodes + sum(len(e.returns) for e in result.evaluations)


def _merge(total: CurriculumResult, stage: Stage, part: TrainResult, seconds: float) -> None:
    total.stages.append(_stage_record(stage, _carry(total), part, seconds))
    total.evaluations += part.evaluations
    total.env_steps, total.episodes, total.seconds = part.env_steps, part.episodes, total.seconds + seconds
    total.valid, total.algorithm, total.discarded = part.valid, part.algorithm or total.algorithm, part.discarded
    total.model_version = part.model_version


def _baseline_record(preset: Curriculum, seeds: list[int], returns: list[float], trained: Evaluation) -> dict:
    mean = sum(returns) / len(returns)
    return {
        "implementation": preset.baseline,
        "stage": preset.stages[-1].name,
        "seeds": seeds,
        "returns": returns,
        "mean_return": mean,
        "trained_returns": trained.returns,
        "trained_mean_return": trained.mean_return,
    }


# --- through the log ------------------------------------------------------------------------------------------


async def run_stages_through_log(
    run_phases,
    settings,
    preset: Curriculum,
    spec,
    *,
    quiet: bool = False,
    curves=None,
    served=None,
    settled=None,
    learned_before: int = 0,
) -> CurriculumResult:
    """The stages in turn against the services :func:`trialog.learn.through_log.train` started, after
    publishing the partners' models, each stage's phases run by ``run_phases``; then the baseline."""
    from trialog import model_registry
    from trialog.bus import connect
    from trialog.controller import Controller
    from trialog.protocol.topics import TRIALS
    from trialog.tools.person import until_ended

    total = CurriculumResult(mode="log")
    if preset.models:
        async with connect(settings) as bus:
            catalog = await model_registry.read_catalog(bus)
            for name, make in preset.models.items():
                algorithm, tensors, meta = await asyncio.to_thread(make, spec)
                data = model_registry.to_safetensors(tensors)
                v = await model_registry.publish_next(bus, catalog, name, algorithm, data, meta)
                _say(quiet, f"{preset.name}: published partner model {name} v{v.version}{_about(meta)}")
                total.models[name] = {"version": v.version, "algorithm": algorithm, **meta}
        await asyncio.sleep(2.0)  # the actor services load it from `models`
    for stage in preset.stages:
        _say(quiet, f"{preset.name}: stage {stage.name} (partners {_partners_text(stage)})")
        started = time.monotonic()
        part = await run_phases(
            settings,
            preset.of_stage(stage, preset.seed + _trials_started(total), total.episodes),
            spec,
            quiet=quiet,
            curves=curves,
            result=_carry(total),
            served=served,
            settled=settled,
            learned_before=learned_before,
        )
        _merge(total, stage, part, time.monotonic() - started)
    if preset.baseline:
        trained = total.evaluations[-1]
        first = preset.seed + _trials_started(total) - len(trained.returns)
        seeds = list(range(first, first + len(trained.returns)))
        base = _with(preset, stage=STAGE_BASELINE)
        played = played_actors(preset, spec)
        async with Controller(connect(settings), name=f"train.{preset.name}.baseline", follow=TRIALS) as ctl:

            async def one(seed: int) -> float:
                setup = base.trial_setup(played, seed)
                tid = await ctl.start_trial(spec.name, seed=seed, **setup, experiment=preset.name, phase="evaluate")
                ended = await until_ended(ctl, spec, preset, tid, setup, seed=seed, quiet=quiet)
                return ended.returns.get(next(iter(played)), 0.0)  # the first learning actor's, as run_phases

            returns = list(await asyncio.gather(*(one(s) for s in seeds)))
        total.baseline = _baseline_record(preset, seeds, returns, trained)
    return total


# --- in-process -------------------------------------------------------------------------------------------------


def run_stages_in_process(run) -> CurriculumResult:
    """The stages in turn in one :class:`trialog.learn.in_process.InProcess` run (its learner, policy
    and seeds going on from stage to stage), the partners' models loaded first; then the baseline."""
    from trialog.learn.curves import Curves, learner_dir
    from trialog.model_registry import make_version

    preset: Curriculum = run.preset
    made = {}
    for name, make in preset.models.items():
        algorithm, tensors, meta = make(run.spec)
        version = make_version(name, 1, algorithm, tensors, meta, store=str((run.out_dir / "models").resolve()))
        for policy in run.policies.values():
            if policy.model == name:
                policy.load(version)
                policy.policy_version = version.version
        _say(run.quiet, f"{preset.name}: loaded partner model {name} v1{_about(meta)}")
        made[name] = {"version": 1, "algorithm": algorithm, **meta}
    total = CurriculumResult(mode="in-process", on_policy=run.on_policy, algorithm=run.result.algorithm, models=made)
    run.curves, run.learner_curves = Curves(run.tensorboard), Curves(learner_dir(run.tensorboard))
    try:
        for stage in preset.stages:
            _say(run.quiet, f"{preset.name}: stage {stage.name} (partners {_partners_text(stage)})")
            started = time.monotonic()
            run.preset = preset.of_stage(stage, preset.seed + _trials_started(total), total.episodes)
            run.result = _carry(total)
            run.next_seed = run.preset.seed
            part = run._run()
            _merge(total, stage, part, time.monotonic() - started)
    finally:
        run.curves.close()
        run.learner_curves.close()
    if preset.baseline:
        trained = total.evaluations[-1]
        run.next_seed = first = preset.seed + _trials_started(total) - len(trained.returns)
        run.preset = _with(preset, stage=STAGE_BASELINE, implementation=preset.baseline)
        live = [run._start("evaluate") for _ in trained.returns]
        returns = {}
        while live:
            for trial, _ticks, ret in run._tick(live):
                live.remove(trial)
                returns[trial.info.seed] = ret
        seeds = list(range(first, first + len(trained.returns)))
        total.baseline = _baseline_record(preset, seeds, [returns[s] for s in seeds], trained)
    run.preset = preset
    return total


# --- both modes -------------------------------------------------------------------------------------------------


def stages_table(result: CurriculumResult) -> str:
    lines = [f"{'stage':<14} {'partners':<28} {'env steps':>10} {'evals':>6} {'last eval':>10}  rule"]
    for s in result.stages:
        last = s["evaluations"][-1][1] if s["evaluations"] else float("nan")
        rule = "none" if s["rule"] is None else ("met" if s["met"] else "not met")
        partners = ", ".join(f"{a}: {'/'.join(p)}" for a, p in s["partners"].items())
        lines.append(
            f"{s['name']:<14} {partners:<28} {s['env_steps']:>10,} {len(s['evaluations']):>6} {last:>10.1f}  {rule}"
        )
    b = result.baseline
    if b:
        lines.append(
            f"last evaluation's {len(b['seeds'])} trials (seeds {b['seeds'][0]}–{b['seeds'][-1]}): trained "
            f"{b['trained_mean_return']:.1f}, {b['implementation']} in its place {b['mean_return']:.1f}"
        )
    return "\n".join(lines)


# --- partner models -----------------------------------------------------------------------------------------------


def demonstrations(spec, implementation: str, trials: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(observations, actions) of ``implementation`` (a decide-style agent) playing every actor of the
    spec's trial, ``trials`` trials seeded ``seed``, ``seed + 1``…, in this process; observations through
    their class's schema, as an export of the same trials would hold them."""
    from trialog.environment import ActorInfo, TrialInfo
    from trialog.learn.memory import flat_observation
    from trialog.protocol.codec import SchemaStore
    from trialog.spec import load_entry

    t, store = spec.trial, SchemaStore.with_builtin()
    impl = spec.actors[implementation]
    agent_class = load_entry(impl.entry, what=f"actor implementation {implementation}")
    factory = load_entry(spec.environments[t.environment].entry, what=f"environment {t.environment}")
    schemas = {n: store.register(c.observation_schema) for n, c in spec.actor_classes.items()}
    observations, actions = [], []
    for i in range(trials):
        actors = tuple(ActorInfo(a.name, a.actor_class, implementation, {**impl.config, **a.config}) for a in t.actors)
        info = TrialInfo(
            trial_id=f"demonstration-{seed + i}", seed=seed + i, actors=actors, max_ticks=t.max_ticks,
            config={**spec.environments[t.environment].config, **t.environment_config}, parameters=dict(t.parameters),
        )  # fmt: skip
        env, agents = factory(info), {a.name: agent_class(info, a) for a in actors}
        seen = env.start()
        for _tick in range(t.max_ticks or 1_000):
            decoded = {
                a.name: store.decode(schemas[a.actor_class].encode(seen[a.name]), schemas[a.actor_class])
                for a in actors
            }
            chosen = {name: agent.decide(decoded[name]) for name, agent in agents.items()}
            for name, action in chosen.items():
                observations.append(flat_observation(decoded[name]))
                actions.append(int(action))
            step = env.update(chosen)
            if step.done or all(step.terminated.get(n) or step.truncated.get(n) for n in agents):
                break
            seen = step.observations
        env.end()
    return np.stack(observations), np.array(actions, np.int32)


def behaviour_clone(implementation: str, *, trials: int, epochs: int, seed: int = 10_000, **config: Any) -> ModelMaker:
    """A partner model: :mod:`trialog.learn.bc` trained on ``implementation``'s demonstrations
    (:func:`demonstrations`), for a policy playing ``trialog.learn.bc:BCPolicy``."""

    def make(spec) -> tuple[str, Mapping[str, np.ndarray], Mapping[str, Any]]:
        from trialog.learn import bc
        from trialog.learn.nets import prefixed

        obs, actions = demonstrations(spec, implementation, trials, seed)
        cfg = bc.BCConfig(observation_size=obs.shape[1], epochs=epochs, **config)
        params = bc.train(cfg, obs, actions, log=None)
        accuracy = float((bc.mlp(params, obs).argmax(1) == actions).mean())
        meta = {"demonstrations": len(actions), "of": implementation, "trials": trials, "accuracy": accuracy,
                "config": dataclasses.asdict(cfg)}  # fmt: skip
        return "bc", prefixed("pi", params), meta

    return make


def _partners_text(stage: Stage) -> str:
    return ", ".join(
        f"{a}: " + "/".join(f"{i}×{w:g}" if len(stage.pool(a)) > 1 else i for i, w in stage.pool(a).items())
        for a in stage.partners
    )


def _about(meta: Mapping[str, Any]) -> str:
    """What a partner model's metadata says of how it was made (a clone: its demonstrations and accuracy)."""
    if "demonstrations" not in meta:
        return ""
    accuracy = f", accuracy {meta['accuracy']:.2f} on them" if "accuracy" in meta else ""
    return f" ({meta['demonstrations']:,} demonstrations of {meta.get('of', '?')}{accuracy})"


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        print(text, file=sys.stderr, flush=True)
