"""``trialog train PRESET --in-process``: the same preset in one process, no broker.

Coach's local mode, RLlib's local mode: the preset's algorithm, hyperparameters, seeds,
schedule and validation, run over the spec's environment implementation directly —
its :class:`~trialog.environment.Environment` ``start``/``update``/``end``, so any
environment a spec can host, not only Gymnasium ids — with the very classes the
services run: the implementation's :class:`~trialog.actor.Policy` decides
(``decide_batch``, one call per tick for every trial in flight), its learner learns
(``add``, ``rounds_due``, ``train_round``) and publishes versions the policy loads
(``tensors``/``metadata`` made into a :class:`~trialog.model_registry.ModelVersion`
and handed to ``Policy.load``, as an actor service does). The way to debug a preset
before paying for the log, and the baseline every learning figure is measured against.

What is the same as through the log (:func:`trialog.learn.through_log.run_phases` with the
services and the learner service):

- the trials: the spec's default trial, the preset's implementation playing its actors,
  trial *i* seeded ``preset.seed + i`` in the order trials start, labelled with the
  experiment and the phase; ``concurrency`` trials in flight during heatup and train
  (a new one starts as soon as one ends, none once the phase's steps are reached; evaluated
  beside training, the training trials in flight at a stretch's end go on after its
  evaluation and count in the next stretch), all ``evaluation_trials`` at once in an
  evaluation; the trials in flight step together, in
  one ``update_batch`` call when the implementation steps in batches
  (:meth:`~trialog.environment.Environment.update_batch`);
- what crosses the log: every observation and action goes through its actor class's
  Avro schema (encoded and decoded: the policy sees what an actor service would, and a
  payload that does not match is an error here too); rewards are aggregated per
  (actor, tick) as the datalog's fold does (I-4); a trial ends when the environment
  says so, when every actor has ended, or at ``max_ticks``;
- what the learner gets: heatup and train trials only; each step as it completes,
  linked to the same actor's previous step (an on-policy learner sorts them by the
  version that acted, :class:`trialog.learn.ppo.PPOLearner`); a version after each
  training round (off-policy) or each update (on-policy), an on-policy learner's
  initial weights as version 1, the learner told of each (``published``);
- the counters: env steps (the ticks of heatup and train trials, counted as each
  ends), episodes, evaluations, validation; ``summary.json``, the table and the plot.

What differs, by design: training is synchronous — a round runs as soon as the steps
owe it and the next tick acts with its version — where through the log the learner
trains beside the actors and they load each version when it arrives. Decide-style
agents (``decide``) and policies play; session-style actors, external implementations
and pre-trial hooks need the services and are refused with a reason.
"""

from __future__ import annotations

import inspect
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trialog.actor import DecideRequest, EndEvent, MessageEvent, Policy, RewardEvent
from trialog.environment import ActorInfo, RewardOut, Step, TrialInfo, steps_in_batches
from trialog.errors import CodecError, TrialogError
from trialog.learn import demonstrated, takes_demonstrations
from trialog.learn.curves import Curves, learner_dir
from trialog.learn.memory import one_step
from trialog.learn.report import Progress, write_summary
from trialog.learn.train import (
    Evaluation,
    Preset,
    TrainResult,
    derived_spec,
    judging,
    learner_for,
    played_actors,
)
from trialog.model_registry import make_version
from trialog.protocol.codec import Schema, SchemaStore
from trialog.protocol.events import LEARN_PHASES
from trialog.protocol.rewards import aggregate, reward_bounds_problem
from trialog.protocol.trial import reaches
from trialog.runtime.pinned import pins_allowed
from trialog.runtime.threads import one_blas_thread
from trialog.spec import load_entry, load_spec
from trialog.tools.judge import JUDGE_CONFIDENCE, JUDGE_NAME


@dataclass(frozen=True)
class _Class:
    """An actor class as the in-process loop uses it: its two schemas (and as JSON for agents)."""

    observation: Schema
    action: Schema
    observation_json: Any
    action_json: Any


@dataclass
class _Actor:
    """One actor of a live trial."""

    info: ActorInfo
    cls: _Class
    policy: Policy | None  # the implementation's one instance (shared by its trials), or
    agent: Any = None  # a decide-style instance for this (trial, actor)
    learning: bool = False  # played by the preset's implementation
    demonstration: bool = False  # if learning: its steps are a demonstrator's (a heatup trial)
    observation: Any = None  # the latest, as an actor would receive it
    action: Any = None  # its action at the current tick
    version: int | None = None  # the model version that chose it
    total: float = 0.0  # the sum of its aggregated rewards (the trial's return for it)
    serial: int = -1  # its last transition in the learner's memory


@dataclass
class _Live:
    info: TrialInfo
    env: Any
    actors: dict[str, _Actor]
    active: set[str]
    tick: int = 0


class InProcess:
    """One preset run in this process (see the module's docstring)."""

    def __init__(self, preset: Preset, out_dir: Path, *, quiet: bool = False, tensorboard: Path | None = None) -> None:
        self.preset, self.out_dir, self.quiet = preset, out_dir, quiet
        self.tensorboard = tensorboard or out_dir / "tensorboard"
        self.curves: Curves | None = None  # the run's and the learner's, while it runs
        self.learner_curves: Curves | None = None
        out_dir.mkdir(parents=True, exist_ok=True)
        self.store = SchemaStore.with_builtin()
        self.spec = load_spec(derived_spec(preset, out_dir), self.store)
        spec, t = self.spec, self.spec.trial
        self.learner = learner_for(preset, spec)  # first: a preset with nothing to train fails with the reason
        self.learn_from, self.judges = judging(preset)
        self.on_policy = bool(getattr(self.learner, "on_policy", False))
        if t.pre_trial_hooks:
            raise TrialogError(
                f"{spec.file}: pre-trial hooks ({', '.join(t.pre_trial_hooks)}) run in the orchestrator: "
                "train this preset through the log (without --in-process)"
            )
        env_impl = spec.environments[t.environment]
        if env_impl.external:
            raise TrialogError(
                f"environment {t.environment!r} is external (served outside Trialog): in-process mode needs its code"
            )
        self.env_factory = load_entry(env_impl.entry, what=f"environment {t.environment}")
        self.env_config = {**env_impl.config, **t.environment_config}
        self.played = played_actors(preset, spec)
        self.classes = {
            name: _Class(
                self.store.register(c.observation_schema),
                self.store.register(c.action_schema),
                json.loads(c.observation_schema),
                json.loads(c.action_schema),
            )
            for name, c in spec.actor_classes.items()
        }
        # Every implementation the trial's actors play: a Policy is one instance (as in an actor
        # service's process), a decide-style class one instance per (trial, actor).
        self.policies: dict[str, Policy] = {}
        self.agent_classes: dict[str, type] = {}
        pools = preset.partners_of(spec)  # a curriculum's stages' partners (and baseline)
        partners = [(a, i) for a in t.actors for i in pools.get(a.name, ())]
        for a, impl_name in [(a, self.played.get(a.name, a.implementation)) for a in t.actors] + partners:
            if impl_name in self.policies or impl_name in self.agent_classes:
                continue
            impl = spec.actors[impl_name]
            if impl.external or impl.client:
                raise TrialogError(
                    f"actor {a.name!r} is played by {impl_name!r}, "
                    f"{'an external implementation' if impl.external else 'a person (client seat)'}: "
                    "in-process mode plays only Trialog's own agents and policies; give the actor another "
                    "implementation in the spec, or train through the log"
                )
            target = load_entry(impl.entry, what=f"actor implementation {impl_name}")
            if inspect.isclass(target) and issubclass(target, Policy):
                self.policies[impl_name] = target(dict(impl.config))
            elif inspect.isclass(target) and hasattr(target, "decide"):
                self.agent_classes[impl_name] = target
            else:
                raise TrialogError(
                    f"actor implementation {impl_name!r} ({impl.entry}) is not a decide-style class or a "
                    "trialog.actor.Policy (a session coroutine needs the actor service): train through the log"
                )
        self.policy = self.policies[preset.implementation]
        self.model = self.policy.model or preset.implementation
        for name, policy in self.policies.items():
            if name != preset.implementation and policy.model and policy.model not in getattr(preset, "models", {}):
                self._say(
                    f"{preset.name}: {name!r} follows model {policy.model!r}, which in-process mode does not load "
                    "(it acts as it does before any version)"
                )
        self.version = 0  # the last version published (through the log: the learner service's counter)
        self.next_seed = preset.seed
        self.result = TrainResult(mode="in-process", on_policy=self.on_policy)
        self.result.algorithm = getattr(self.learner, "algorithm", "")

    # --- the phases (as trialog.learn.through_log.run_phases) ---------------------------------------------
    def run(self) -> TrainResult:
        self.curves, self.learner_curves = Curves(self.tensorboard), Curves(learner_dir(self.tensorboard))
        try:
            return self._run()
        finally:
            self.curves.close()
            self.learner_curves.close()

    def _run(self) -> TrainResult:
        s, result = self.preset.schedule, self.result
        progress, recent = Progress(self.quiet), []
        start = result.env_steps  # a curriculum's stage goes on from the steps before it
        started = time.monotonic()
        if getattr(self.learner, "publish_initial", False) and self.version == 0:  # once (a curriculum: stages)
            self._publish(0.0)  # on-policy: actors act with version 1 before anything is learned

        live: list[_Live] = []
        # Evaluated beside training through the log, the training trials in flight at a stretch's end go on
        # into the next one (run_phases): here they wait for the evaluation and go on after it.
        carry = s.evaluate_beside_training and pins_allowed(self.spec, self.played)
        budget = start + s.total_steps

        def run_until(phase: str, target_steps: int, carried: bool = False) -> None:
            while result.env_steps < target_steps or (live and not (carried and result.env_steps < budget)):
                while result.env_steps < target_steps and len(live) < s.concurrency:
                    live.append(self._start(phase))
                for trial, ticks, ret in self._tick(live):
                    live.remove(trial)
                    result.env_steps += ticks
                    result.episodes += 1
                    recent.append(ret)
                    self.curves.trial_ended(result.env_steps, ret, self.version)
                    last = result.evaluations[-1] if result.evaluations else None
                    progress.show(phase, result.env_steps, start + s.total_steps, recent, last, self.version)

        run_until("heatup", start + s.heatup_steps)
        next_eval = start + s.steps_between_evaluations
        # Every run ends with an evaluation, even one whose heatup (its trials in flight finishing) ate the budget.
        while result.env_steps < start + s.total_steps or not result.evaluations:
            run_until("train", min(next_eval, start + s.total_steps), carried=carry)
            next_eval = result.env_steps + s.steps_between_evaluations
            evaluating = [self._start("evaluate") for _ in range(s.evaluation_trials)]
            rets = []
            while evaluating:
                for trial, _ticks, ret in self._tick(evaluating):
                    evaluating.remove(trial)
                    rets.append(ret)
            e = Evaluation(result.env_steps, result.episodes, sum(rets) / len(rets), rets, self.version)
            result.evaluations.append(e)
            progress.evaluated(e, start + s.total_steps)
            self.curves.evaluated(e)
            if self.preset.stop_when_valid and result.meets(self.preset.validation):
                run_until("train", 0)  # the trials in flight finish, as through the log
                break
        progress.done()
        result.seconds = time.monotonic() - started
        result.valid = result.meets(self.preset.validation) if self.preset.validation else None
        result.discarded = self._discarded()
        result.model_version = self.version
        return result

    # --- trials -----------------------------------------------------------------------------------------
    def _start(self, phase: str) -> _Live:
        seed, self.next_seed = self.next_seed, self.next_seed + 1
        t, setup = self.spec.trial, self.preset.trial_setup(self.played, seed)
        actors = tuple(
            ActorInfo(
                a.name,
                a.actor_class,
                (impl := setup["implementations"].get(a.name, a.implementation)),
                {**self.spec.actors[impl].config, **a.config},
            )
            for a in t.actors
        )
        info = TrialInfo(
            trial_id=f"{self.preset.name}-{phase}-{seed}",
            seed=seed,
            config=dict(self.env_config),
            actors=actors,
            parameters={**t.parameters, **setup.get("parameters", {})},
            max_ticks=t.max_ticks,
            experiment=self.preset.name,
            phase=phase,
        )
        env = self.env_factory(info)
        played = {}
        for a in actors:
            agent = None
            if a.implementation in self.agent_classes:  # as the actor service makes one
                agent = self.agent_classes[a.implementation](info, a)
                agent.observation_schema = self.classes[a.actor_class].observation_json
                agent.action_schema = self.classes[a.actor_class].action_json
            played[a.name] = _Actor(
                a,
                self.classes[a.actor_class],
                self.policies.get(a.implementation),
                agent,
                learning=a.implementation == self.preset.implementation and phase in LEARN_PHASES,
                demonstration=takes_demonstrations(self.learner, phase),
            )
        trial = _Live(info, env, played, set(played))
        for name, observation in self._observe(trial, env.start(), 0).items():
            played[name].observation = observation
        return trial

    def _observe(self, trial: _Live, observations: Mapping[str, Any], tick: int) -> dict[str, Any]:
        """Each active actor's observation as an actor service receives it: through its class's schema."""
        missing = sorted(a for a in trial.active if a not in observations)
        if missing:
            raise TrialogError(
                f"trial {trial.info.trial_id}: the environment returned no observation at tick {tick} "
                f"for {', '.join(missing)}"
            )
        out = {}
        for name in trial.active:
            schema = trial.actors[name].cls.observation
            try:
                out[name] = self.store.decode(schema.encode(observations[name]), schema)
            except CodecError as exc:
                raise TrialogError(
                    f"trial {trial.info.trial_id}: the observation for {name} at tick {tick} does not match its "
                    f"schema: {exc}"
                ) from None
        return out

    def _decide(self, live: Sequence[_Live]) -> None:
        """Every active actor's action at its trial's tick: one ``decide_batch`` per policy for all
        the trials in flight, ``decide`` per decide-style agent; each through the action schema."""
        by_policy: dict[str, list[tuple[_Live, _Actor]]] = {}
        for trial in live:
            for name in sorted(trial.active):
                actor = trial.actors[name]
                if actor.policy is not None:
                    by_policy.setdefault(actor.info.implementation, []).append((trial, actor))
                else:
                    actor.action = actor.agent.decide(actor.observation)
                    actor.version = getattr(actor.agent, "policy_version", None)
        for impl, pending in by_policy.items():
            policy = self.policies[impl]
            actions = list(
                policy.decide_batch([DecideRequest(t.info, a.info, t.tick, a.observation) for t, a in pending])
            )
            if len(actions) != len(pending):
                raise TrialogError(f"{impl}: decide_batch returned {len(actions)} actions for {len(pending)} requests")
            for (_, actor), action in zip(pending, actions):
                actor.action, actor.version = action, policy.policy_version
        for trial in live:
            for name in trial.active:
                actor = trial.actors[name]
                schema = actor.cls.action
                try:
                    actor.action = self.store.decode(schema.encode(actor.action), schema)
                except CodecError as exc:
                    raise TrialogError(
                        f"trial {trial.info.trial_id}: the action of {name} ({actor.info.implementation}) at tick "
                        f"{trial.tick} does not match the action schema: {exc}"
                    ) from None

    def _tick(self, live: list[_Live]) -> list[tuple[_Live, int, float]]:
        """One tick of every trial in flight; returns the trials that ended (with their ticks and
        the learning actor's return). Then the learner trains what the steps owe it."""
        self._decide(live)
        # One update_batch call per implementation that steps in batches (as the environment
        # service does), one update per trial otherwise.
        steps: dict[int, Any] = {}
        by_kind: dict[type, list[_Live]] = {}
        for trial in live:
            by_kind.setdefault(type(trial.env), []).append(trial)
        for kind, trials in by_kind.items():
            actions = [{name: t.actors[name].action for name in t.active} for t in trials]
            if steps_in_batches(kind):
                out = list(kind.update_batch([t.env for t in trials], actions))
                if len(out) != len(trials):
                    raise TrialogError(f"{kind.__name__}.update_batch returned {len(out)} steps for {len(trials)}")
            else:
                out = [t.env.update(a) for t, a in zip(trials, actions)]
            steps.update((id(t), step) for t, step in zip(trials, out))
        ended = []
        for trial in live:
            step = steps[id(trial)]
            if not isinstance(step, Step):
                raise TrialogError(f"update must return trialog.environment.Step, got {type(step).__name__}")
            reason = self._stepped(trial, step)
            if reason is not None:
                ended.append((trial, trial.tick, self._end(trial, reason)))
        self._train()
        return ended

    def _stepped(self, trial: _Live, step: Step) -> str | None:
        """Rewards, transitions and the next observations of one update; the reason the trial ends, if it does."""
        tick, info = trial.tick, trial.info
        sources = self._rewards(trial, step, tick)
        rewards = {name: aggregate(r for _, r in reaching) for name, reaching in sources.items()}
        trial.tick = next_tick = tick + 1
        ended_now = {a for a in trial.active if step.terminated.get(a) or step.truncated.get(a)}
        reason = None
        if step.done or ended_now >= trial.active:
            reason = "environment"
        elif info.max_ticks is not None and next_tick >= info.max_ticks:
            reason = "max_ticks"
        observations = self._observe(trial, step.observations, next_tick)
        if self.learn_from is not None:  # what the learner is told to learn from, the judges' ratings among them
            final = ended_now | (trial.active if reason else set())
            learned = {
                name: self._learned(name, sources.get(name, []), trial.actors[name].observation, obs, name in final)
                for name, obs in observations.items()
                if trial.actors[name].learning
            }
        else:
            learned = rewards
        for m in step.messages:
            for name, actor in trial.actors.items():
                cls = actor.info.actor_class
                if actor.agent is not None and any(reaches(r, "env", name, cls) for r in m.receivers):
                    actor.agent.on_message(MessageEvent(tick, "env", m.payload))
        for name, reward in rewards.items():  # an actor that has left may still be rewarded: it counts
            trial.actors[name].total += reward
        for name in trial.active:
            actor = trial.actors[name]
            reward, terminated = learned.get(name, 0.0), bool(step.terminated.get(name, False))
            if actor.learning:  # each step as it completes, after the same actor's previous one
                row = (actor.observation, actor.action, reward, observations[name], terminated, actor.version)
                serial = self.learner.add(one_step(*row), follows=actor.serial, **demonstrated(actor.demonstration))
                actor.serial = int(serial[0])
            actor.observation = observations[name]
        trial.active -= ended_now
        return reason

    def _learned(self, name: str, reaching: list, before: Any, after: Any, final: bool) -> float:
        """The reward the learner takes for one step when told its sources (I-4 over those only):
        the environment's that match, and each judge's rating of the step, as ``trialog judge``
        sends it through the log."""
        judged = [
            (f"person:{JUDGE_NAME}-{i}", RewardOut(name, value, JUDGE_CONFIDENCE))
            for i, rate in enumerate(self.judges)
            if (value := rate(before, after, final)) is not None
        ]
        return aggregate(r for sender, r in [*reaching, *judged] if self.learn_from(sender))

    def _rewards(self, trial: _Live, step: Step, tick: int) -> dict[str, list[tuple[str, RewardOut]]]:
        """Per actor, the rewards of the tick reaching it, by sender (their aggregate, Σcv/Σc, is its reward: I-4)."""
        items = (
            [RewardOut(name, value) for name, value in step.rewards.items()]
            if isinstance(step.rewards, Mapping)
            else list(step.rewards)
        )
        sources: dict[tuple[str, str], RewardOut] = {}
        for r in items:
            problem = reward_bounds_problem(r.value, r.confidence)
            if problem is not None:
                raise TrialogError(f"trial {trial.info.trial_id}: environment reward at tick {tick}: {problem}")
            sources[(f"env/{r.source}" if r.source else "env", r.receiver)] = r  # a later one replaces it
        out = {}
        for name, actor in trial.actors.items():
            cls = actor.info.actor_class
            reaching = [(sender, r) for (sender, to), r in sources.items() if reaches(to, sender, name, cls)]
            if not reaching:
                continue
            out[name] = reaching
            if actor.agent is not None:
                for sender, r in reaching:
                    actor.agent.on_reward(RewardEvent(tick, float(r.value), float(r.confidence), sender, r.user_data))
        return out

    def _end(self, trial: _Live, reason: str) -> float:
        """The trial is over; returns the learning actor's return."""
        for actor in trial.actors.values():
            if actor.agent is not None:
                actor.agent.on_end(EndEvent(trial.tick, reason))
        for policy in self.policies.values():
            policy.trial_ended(trial.info.trial_id)
        trial.env.end()
        learning = next((a for a in trial.actors.values() if a.info.implementation == self.preset.implementation), None)
        return learning.total if learning is not None else 0.0

    # --- learning -----------------------------------------------------------------------------------
    def _train(self) -> None:
        """As the learner service: a version after each round (off-policy) or after each update
        (on-policy, whose next version is the one it keeps transitions of from now on)."""
        while self.learner.rounds_due():
            self.version += 1
            loss = self.learner.train_round()
            while self.on_policy and self.learner.rounds_due():
                loss = self.learner.train_round()
            self._publish(loss, number=self.version)

    def _publish(self, loss: float, number: int | None = None) -> None:
        """A version made as the learner service makes it, loaded as an actor service loads it."""
        self.version = number or self.version + 1
        meta = {**self.learner.metadata(), "discarded": self._discarded(), "loss": loss}
        version = make_version(
            self.model,
            self.version,
            getattr(self.learner, "algorithm", ""),
            self.learner.tensors(),
            meta,
            store=str((self.out_dir / "models").resolve()),
        )
        self.policy.load(version)
        self.policy.policy_version = version.version
        if hasattr(self.learner, "published"):
            self.learner.published(self.version)
        if self.learner_curves is not None:
            self.learner_curves.published(self.learner, self.version, self._discarded())

    def _discarded(self) -> int:
        return int(getattr(self.learner, "discarded", 0))

    def _say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)


def train_in_process(
    preset: Preset, out_dir: Path, *, quiet: bool = False, tensorboard: Path | None = None
) -> TrainResult:
    """Run the preset in this process and write ``summary.json`` into ``out_dir`` (and TensorBoard
    curves into ``tensorboard``, by default ``out_dir/tensorboard``)."""
    run = InProcess(preset, out_dir, quiet=quiet, tensorboard=tensorboard)
    run._say(f"{preset.name}: TensorBoard curves in {run.tensorboard}")
    # On one BLAS thread, as a service runs (trialog/runtime/threads.py): another one spinning
    # took the core this run's training thread works on.
    with one_blas_thread():
        result = preset.run_in_process(run)
    write_summary(out_dir, preset, result)
    return result
