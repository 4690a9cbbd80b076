"""The environment runtime: the tick barrier around a user's :class:`~trialog.environment.Environment`.

Per trial it waits for the actions of tick t from every active actor, applies the
response-timeout policy to latecomers, calls ``update`` and writes the
observations of tick t+1 (I-6: two hops per tick, nothing in between).

**Real time.** A trial with ``tick_interval_ms`` steps once per interval, on a steady
clock at a phase of the interval it shares with other trials (:func:`~trialog.runtime.pace.next_deadline`); an actor
whose action is not in by then gets the timeout policy (``actor.timeout``, then
the default action). A person who waits does not stall the trial, and an agent
that answers at once does not speed it up.

**Slow environments.** While the updates of a trial are slow and mostly wait (sleep,
I/O, native code; :mod:`trialog.runtime.pace` says how that is judged), they run in a
worker thread, one at a time, its records arriving meanwhile handled after each in
log order: such an environment slows only its own trials. Other updates stay inline:
a thread hop costs ~0.1 ms, and Python computing in threads only takes turns.

**Batched stepping.** The trials of an implementation overriding ``update_batch`` that a poll
completes wait (their later records behind them) until the poll is handled, then one call steps
them all, each trial's outputs written as after its own ``update``; during catch-up, alone.

Every decision that changes a trial is taken *from the log*: a timeout is
written as ``actor.timeout`` and applied when read back, a parameter change is
applied when its ``parameters.changed`` is read. So replaying a trial's events
into a fresh environment with the logged seed reproduces it exactly — which is
how another instance takes over a trial after a crash (see
:mod:`trialog.runtime.service`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson

from trialog.bus.base import Record
from trialog.environment import RewardOut, Step, steps_in_batches, update_alone, update_together
from trialog.errors import BadRecord, CodecError
from trialog.protocol.events import (
    HEADER_KIND,
    Action,
    ActorJoined,
    ActorLeft,
    ActorTimeout,
    EnvironmentDone,
    Event,
    Message,
    Observation,
    ParametersChanged,
    TrialEnded,
    TrialPending,
    TrialStarted,
    TrialTerminating,
    View,
)
from trialog.protocol.owners import message_problem
from trialog.protocol.rewards import reward_bounds_problem
from trialog.protocol.roles import ENVIRONMENT
from trialog.protocol.topics import EVENTS
from trialog.protocol.trial import ClassSchemas, class_schemas, dumps, loads, operator_code, trial_info
from trialog.runtime.handler import Handler, safe_point
from trialog.runtime.pace import Pace, next_deadline, trial_phase
from trialog.runtime.recent import RecentlyEnded
from trialog.runtime.step_rewards import reward_record, rewards_of, split_carried
from trialog.spec import load_entry
from trialog.telemetry import metrics
from trialog.telemetry.logs import get_logger
from trialog.trust.seats import SeatBook, seat_headers

log = get_logger(__name__)

EnvFactory = Callable[[Any], Any]  # TrialInfo -> environment instance
UPDATE_THREADS = 8  # updates of different trials that may run at once (each trial runs one at a time)


@dataclass
class _Trial:
    started: TrialStarted
    env: Any
    partition: int
    start_offset: int
    schemas: dict[str, ClassSchemas]
    actor_class: dict[str, str]
    clients: frozenset[str] = frozenset()
    tick: int = 0
    active: set[str] = field(default_factory=set)
    actions: dict[str, Any] = field(default_factory=dict)
    applied: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # actor -> last applied (tick, payload)
    observed: dict[str, int] = field(default_factory=dict)  # actor -> last tick whose observation was read back
    waiting_since: float = 0.0
    timed_out: bool = False  # actor.timeout written for this tick
    due: bool = False  # real time: this tick's interval is over
    deadline: float | None = None  # real time: when the current tick is due (the event loop's clock)
    terminating: bool = False
    done: bool = False
    pending_parameters: list[tuple[int, dict]] = field(default_factory=list)  # (effective tick, parameters)
    stepping: bool = False  # update() is running in a worker thread, or the trial waits for a batch
    pace: Pace = field(default_factory=Pace)  # inline, or in a worker thread while slow and waiting
    backlog: list[tuple[Record, Event]] = field(default_factory=list)  # records that arrived meanwhile, in log order


class EnvironmentHandler(Handler):
    """Hosts every trial whose environment implementation is one of ``implementations``."""

    kinds = frozenset(
        {
            TrialStarted.KIND,
            Observation.KIND,
            Action.KIND,
            ActorTimeout.KIND,
            TrialTerminating.KIND,
            TrialEnded.KIND,
            Message.KIND,
            ParametersChanged.KIND,
            ActorJoined.KIND,
            TrialPending.KIND,
        }
    )
    owner_role = ENVIRONMENT
    service_name = "environment"

    def __init__(
        self,
        implementations: Mapping[str, str | EnvFactory],
        operator_configs: Mapping[str, Mapping[str, Any]] | None = None,
    ):
        """``implementations``: name → import path (``module:Class``) or factory;
        ``operator_configs``: name → the config the spec gives it, where the config keys
        that name code come from (:func:`~trialog.protocol.trial.operator_code`)."""
        self.operator_configs = dict(operator_configs or {})
        self.factories: dict[str, EnvFactory] = {}
        for name, entry in implementations.items():
            self.factories[name] = load_entry(entry, what=f"environment {name}") if isinstance(entry, str) else entry
        self.trials: dict[str, _Trial] = {}
        self.seats = SeatBook()  # who holds each client seat (joins come before the trial starts)
        self.ended: RecentlyEnded[None] = RecentlyEnded()  # a repeated trial.started changes nothing
        self._workers = ThreadPoolExecutor(max_workers=UPDATE_THREADS, thread_name_prefix="env-update")
        self._metric_children: dict[str, tuple] = {}  # environment name -> its tick metrics
        self._queued: list[tuple[_Trial, int, dict]] = []  # (trial, tick, actions) waiting for their batch
        self._batch_pace: dict[type, Pace] = {}  # per batched implementation: inline, or in a worker
        self._batching: set[type] = set()  # implementations with a batch in a worker thread
        self.batches = 0  # update_batch calls made (for tests and metrics)

    # --- log events ------------------------------------------------------------------------
    def should_decode(self, record: Record, kind: str | None) -> bool:
        return kind in (TrialStarted.KIND, TrialPending.KIND, ActorJoined.KIND) or record.trial_id in self.trials

    def handle(self, record: Record, event: Event) -> None:
        if isinstance(event, TrialPending):
            return  # read only so that the loop learns the trial's seats: the joins that follow are theirs
        if isinstance(event, ActorJoined):
            # Refusals are the orchestrator's to report; the join's offset is where a rebuild of the trial starts.
            self.seats.joined(event.trial_id, event.actor, *seat_headers(record.headers), offset=record.offset)
            return
        if isinstance(event, TrialStarted):
            if (
                event.environment in self.factories
                and event.trial_id not in self.trials
                and event.trial_id not in self.ended
            ):
                self._start(record, event)
            return
        trial = self.trials.get(event.trial_id)
        if trial is None:
            return
        if trial.stepping:  # per-trial order: after the update under way
            if isinstance(event, TrialEnded):
                self.seats.forget(trial.started.trial_id)
                self._close(trial)  # the update's result is dropped when it returns
            else:
                trial.backlog.append((record, event))
            return
        match event:
            case Observation():
                trial.observed[event.actor] = max(trial.observed.get(event.actor, -1), event.tick)
            case Action():
                self._on_action(trial, record, event)
            case ActorTimeout():
                self._on_timeout(trial, event)
            case ParametersChanged():
                self._on_parameters(trial, event)
            case Message() if ("env" in event.receivers or "*" in event.receivers) and message_problem(
                event, trial.tick, trial.actor_class
            ) is None:
                trial.env.on_message(event.sender, loads(event.payload))
            case TrialTerminating():
                trial.terminating = True
            case TrialEnded():
                self.seats.forget(trial.started.trial_id)
                self._close(trial)

    def _start(self, record: Record, started: TrialStarted) -> None:
        factory = self.factories[started.environment]
        info = operator_code(trial_info(started), factory, self.operator_configs.get(started.environment, {}))
        schemas = class_schemas(self.loop.bus.store, started)
        joined_at = self.seats.first_offset(started.trial_id)  # a rebuild must see who holds the seats
        trial = _Trial(
            started=started,
            env=None,
            partition=record.partition,
            start_offset=record.offset if joined_at is None else min(record.offset, joined_at),
            schemas=schemas,
            actor_class={a.name: a.actor_class for a in started.actors},
            clients=frozenset(a.name for a in started.actors if a.client),
            active={a.name for a in started.actors},
        )
        self.trials[started.trial_id] = trial
        try:
            trial.env = factory(info)
            observations = trial.env.start()
        except Exception as exc:  # the user's environment failed: the trial ends with reason error
            self._fail(trial, f"environment start failed: {type(exc).__name__}: {exc}")
            return
        self._emit_view(trial, 0)
        self._emit_observations(trial, 0, observations, {}, {}, final=False)
        self._begin_wait(trial)

    def _on_action(self, trial: _Trial, record: Record, action: Action) -> None:
        """Apply the action if it is the actor's answer to its current observation; a repeat
        of the last applied action changes nothing; anything else is a bad record."""
        actor, tick = action.actor, action.tick
        if actor not in trial.actor_class:
            raise BadRecord(f"action from {actor!r}, who is not an actor of this trial")
        if actor in trial.clients:
            refusal = self.seats.refuses(action.trial_id, actor, seat_headers(record.headers)[0])
            if refusal is not None:
                raise BadRecord(f"refused: action at tick {tick}: {refusal}")
        schema = trial.schemas[trial.actor_class[actor]].action
        try:
            value = self.loop.bus.store.decode(action.payload, schema)
        except CodecError as exc:
            raise BadRecord(f"action of {actor} at tick {tick} does not match its schema: {exc}") from None
        if trial.applied.get(actor) == (tick, action.payload):
            return  # a repeat (I-8)
        if not (0 <= tick <= trial.tick and trial.observed.get(actor, -1) >= tick):
            raise BadRecord(
                f"action of {actor} at tick {tick}: an action answers the actor's observation of the current tick "
                f"({trial.tick}) and is logged after it"
            )
        if tick < trial.tick or actor in trial.actions:
            raise BadRecord(
                f"action of {actor} at tick {tick}: that tick already has the actor's action or timeout "
                f"(current tick {trial.tick})"
            )
        if trial.done:
            return  # the answer to the last observation, as the trial ended: nothing left to apply it to
        if actor not in trial.active:
            raise BadRecord(f"action of {actor} at tick {tick}: the actor has left the trial")
        trial.actions[actor] = value
        trial.applied[actor] = (tick, action.payload)
        self._maybe_step(trial)

    def _on_parameters(self, trial: _Trial, change: ParametersChanged) -> None:
        try:
            parameters = orjson.loads(change.parameters)
        except ValueError as exc:
            raise BadRecord(f"parameters.changed carries invalid JSON: {exc}") from None
        if not isinstance(parameters, dict) or change.tick < 0:
            raise BadRecord(f"parameters.changed at tick {change.tick} must carry a JSON object for a tick >= 0")
        if trial.done:
            raise BadRecord(f"parameters.changed at tick {change.tick}: the trial is over in its environment")
        trial.pending_parameters.append((change.tick, parameters))

    def _on_timeout(self, trial: _Trial, timeout: ActorTimeout) -> None:
        if (
            trial.done
            or timeout.tick != trial.tick
            or timeout.actor not in trial.active
            or timeout.actor in trial.actions
        ):
            return  # the actor answered first: the log says so, and the fold reads it alike
        schemas = trial.schemas[trial.actor_class[timeout.actor]]
        if timeout.policy == "default_action" and schemas.has_default_action:
            trial.actions[timeout.actor] = schemas.default_action
        else:
            trial.active.discard(timeout.actor)
        self._maybe_step(trial)

    # --- the tick ------------------------------------------------------------------------------
    def _maybe_step(self, trial: _Trial) -> None:
        if trial.done or trial.stepping or any(a not in trial.actions for a in trial.active):
            return
        if self._before_deadline(trial):
            return  # real time: the deadline timer steps it
        if not trial.active:
            self._finish(trial, trial.tick, "environment", "every actor left the trial")
            return
        tick = trial.tick
        # A change takes effect before the update of its logged tick (or of the current
        # tick if it arrived late) — decided from the log, so replay applies it alike.
        due = [p for t, p in trial.pending_parameters if t <= tick]
        trial.pending_parameters = [(t, p) for t, p in trial.pending_parameters if t > tick]
        for params in due:
            trial.env.set_parameters(params)
        actions, trial.actions = trial.actions, {}
        if not self.loop.is_live(EVENTS, trial.partition):  # catch-up: in log order, compared with the log
            self._stepped(trial, tick, *update_alone(trial.env, actions))
            return
        if steps_in_batches(type(trial.env)):
            # With the other trials this poll completes: the trial's later records wait (backlog).
            trial.stepping = True
            self._queued.append((trial, tick, actions))
            if len(self._queued) == 1:  # made ready outside a poll (a deadline, a timeout read back): next turn
                asyncio.get_running_loop().call_soon(self.polled)
            return
        if not trial.pace.off_loop:
            self._stepped(trial, tick, *trial.pace.timed(update_alone, trial.env, actions))
            return
        # A slow update runs in a worker thread, so that it slows only its own trial. Records
        # of this trial that arrive meanwhile wait their turn (trial.backlog).
        trial.stepping = True
        future = asyncio.get_running_loop().run_in_executor(
            self._workers, trial.pace.timed, update_alone, trial.env, actions
        )
        future.add_done_callback(lambda f: None if f.cancelled() else self._stepped(trial, tick, *f.result()))

    # --- batched stepping ------------------------------------------------------------------------
    def polled(self) -> None:
        """Step what waits, one call per implementation (in a worker while slow and waiting), until nothing does."""
        while self._queued:
            queued, self._queued = self._queued, []
            groups: dict[type, list[tuple[_Trial, int, dict]]] = {}
            for q in queued:
                trial = q[0]
                if trial.done or self.trials.get(trial.started.trial_id) is not trial:
                    trial.stepping = False
                    self._end_env(trial)  # ended, failed or moved while it waited
                elif type(trial.env) in self._batching:
                    self._queued.append(q)  # after the batch under way in the worker
                else:
                    groups.setdefault(type(trial.env), []).append(q)
            if not groups:  # all wait for a worker
                return
            for kind, batch in groups.items():
                pace = self._batch_pace.setdefault(kind, Pace())
                call = (update_together, kind, [q[0].env for q in batch], [q[2] for q in batch])
                if not pace.off_loop:
                    self._write_batch(batch, pace.timed(*call))
                    continue
                self._batching.add(kind)
                done = asyncio.get_running_loop().run_in_executor(self._workers, pace.timed, *call)
                done.add_done_callback(lambda f, k=kind, b=batch: f.cancelled() or self._write_batch(b, f.result(), k))

    def _write_batch(self, batch: list[tuple[_Trial, int, dict]], stepped: tuple[list, str], kind=None) -> None:
        """Write what a batch's trials produced (``kind``: back from a worker; what waits goes next)."""
        results, failed = stepped
        self.batches += 1
        self._batching.discard(kind)
        if failed:
            log.warning("update_batch failed; its trials were stepped one by one", trials=len(batch), error=failed)
        for (trial, tick, _), (step, error) in zip(batch, results):
            self._stepped(trial, tick, step, error)
        if kind is not None:
            self.polled()

    def _stepped(self, trial: _Trial, tick: int, step: Step | None, error: str) -> None:
        """The update of ``tick`` returned (or failed): write what it produced, then handle
        the trial's records that waited for it."""
        trial.stepping = False
        if self.trials.get(trial.started.trial_id) is not trial:
            self._end_env(trial)  # ended or moved meanwhile: nothing to write
            return
        self._write_step(trial, tick, step, error)
        while trial.backlog and not trial.stepping:
            record, event = trial.backlog.pop(0)
            kind = record.header(HEADER_KIND)
            # as the loop would have, in log order
            self.loop.handle(record, event, kind, self.must_judge(record, kind))

    def _tick_metrics(self, environment: str) -> tuple:
        """The tick metrics of one environment (a labelled child costs a lookup per tick otherwise)."""
        children = self._metric_children.get(environment)
        if children is None:
            children = self._metric_children[environment] = (
                metrics.TICKS.labels(environment),
                metrics.TICK_SECONDS.labels(environment),
            )
        return children

    def _write_step(self, trial: _Trial, tick: int, step: Step | None, error: str) -> None:
        if step is None:
            self._fail(trial, f"environment update failed at tick {tick}: {error}")
            return
        if self.loop.is_live(
            EVENTS, trial.partition
        ):  # not while replaying a trial taken over (counted by its first host)
            ticks, tick_seconds = self._tick_metrics(trial.started.environment)
            ticks.inc()
            tick_seconds.observe(self.loop.log.time() - trial.waiting_since)
        rewards = rewards_of(step.rewards)
        problem = next((p for r in rewards if (p := reward_bounds_problem(r.value, r.confidence)) is not None), None)
        if problem is not None:  # the user's environment: the trial ends with the reason, as for a bad observation
            self._fail(trial, f"environment reward at tick {tick} cannot count: {problem}")
            return
        carried, rest = split_carried(rewards, trial.active)
        self._emit_rewards(trial, tick, rest)
        for i, m in enumerate(step.messages):
            self.loop.emit(
                Message(
                    trial.started.trial_id,
                    tick=tick,
                    sender="env",
                    receivers=tuple(m.receivers),
                    message_id=f"env-{tick}-{i}",
                    payload=dumps(m.payload),
                )
            )
        trial.tick = next_tick = tick + 1
        ended_now = {a for a in trial.active if step.terminated.get(a) or step.truncated.get(a)}
        max_ticks = trial.started.max_ticks
        reason = None
        if step.done or ended_now >= trial.active:
            reason = "environment"
        elif max_ticks is not None and next_tick >= max_ticks:
            reason = "max_ticks"
        elif trial.terminating:
            reason = "terminated"
        self._emit_view(trial, next_tick)
        self._emit_observations(
            trial,
            next_tick,
            step.observations,
            step.terminated,
            step.truncated,
            final=reason is not None,
            ended=ended_now,
            carried=carried,
        )
        if reason is not None:
            self._finish(trial, next_tick, reason)
            return
        trial.active -= ended_now
        self._begin_wait(trial)

    def _emit_observations(
        self, trial, tick, observations, terminated, truncated, *, final: bool, ended=frozenset(), carried=None
    ) -> None:
        """One observation per active actor, each carrying its reward of ``carried`` (actor -> reward of
        the tick before: :func:`~trialog.runtime.step_rewards.split_carried`); should one fail, the
        trial fails and those rewards are written as records of their own: every reward is logged."""
        carried = carried or {}
        missing = [a for a in trial.active if a not in observations]
        if missing:
            self._emit_rewards(trial, tick - 1, list(carried.values()))
            self._fail(trial, f"environment returned no observation at tick {tick} for {', '.join(sorted(missing))}")
            return
        out = []
        for actor in sorted(trial.active):
            schema = trial.schemas[trial.actor_class[actor]].observation
            try:
                payload = schema.encode(observations[actor])
            except CodecError as exc:
                self._emit_rewards(trial, tick - 1, list(carried.values()))
                self._fail(trial, f"observation for {actor} at tick {tick} does not match its schema: {exc}")
                return
            reward = carried.get(actor)
            out.append(
                Observation(
                    trial.started.trial_id,
                    tick=tick,
                    actor=actor,
                    payload=payload,
                    terminated=bool(terminated.get(actor, False)),
                    truncated=bool(truncated.get(actor, False)),
                    final=final or actor in ended,
                    reward=None if reward is None else float(reward.value),
                )
            )
        for obs in out:
            self.loop.emit(obs)

    def _emit_view(self, trial: _Trial, tick: int) -> None:
        view = getattr(trial.env, "view", None)
        try:
            value = view() if view is not None else None
        except Exception as exc:  # a view is for people: its failure must not end the trial
            log.warning(
                "environment view failed", trial=trial.started.trial_id, tick=tick, error=f"{type(exc).__name__}: {exc}"
            )
            return
        if value is not None:
            self.loop.emit(View(trial.started.trial_id, tick=tick, view=dumps(value)))

    def _emit_rewards(self, trial: _Trial, tick: int, items: list[RewardOut]) -> None:
        for r in items:
            self.loop.emit(reward_record(trial.started.trial_id, tick, r))

    def _begin_wait(self, trial: _Trial) -> None:
        trial.waiting_since = self.loop.log.time()  # response deadlines do not count the log's outages
        trial.timed_out = trial.due = False
        interval = trial.started.tick_interval_ms
        if interval and self.loop.is_live(EVENTS, trial.partition):
            clock, seconds, tid = asyncio.get_running_loop(), interval / 1000, trial.started.trial_id
            trial.deadline = next_deadline(trial.deadline, clock.time(), seconds, trial_phase(tid, seconds))
            clock.call_at(trial.deadline, self._deadline, tid, trial.tick)

    def _before_deadline(self, trial: _Trial) -> bool:
        """Real time only, and only live: during catch-up the log's own timeouts decide."""
        return bool(trial.started.tick_interval_ms) and not trial.due and self.loop.is_live(EVENTS, trial.partition)

    def _deadline(self, trial_id: str, tick: int) -> None:
        """The tick interval is over: step, or write the latecomers' timeouts first."""
        trial = self.trials.get(trial_id)
        if trial is None or trial.done or trial.tick != tick or trial.due:
            return
        if self.loop.log.away:  # nothing can be written meanwhile: the tick waits with the log
            return self._begin_wait(trial)
        trial.due = True
        if all(a in trial.actions for a in trial.active):
            self._maybe_step(trial)
        else:
            self._time_out(trial)

    def _finish(self, trial: _Trial, tick: int, reason: str, details: str = "") -> None:
        trial.done = True
        self.loop.emit(EnvironmentDone(trial.started.trial_id, tick=tick, reason=reason, details=details))
        self._end_env(trial)

    def _fail(self, trial: _Trial, details: str) -> None:
        log.error("trial failed in its environment", trial=trial.started.trial_id, details=details)
        self._finish(trial, trial.tick, "error", details)

    def _end_env(self, trial: _Trial) -> None:
        if trial.env is not None and not trial.stepping:
            try:
                trial.env.end()
            except Exception:
                log.exception("environment end() failed", trial=trial.started.trial_id)
            trial.env = None

    def _close(self, trial: _Trial) -> None:
        self._end_env(trial)
        if self.trials.get(trial.started.trial_id) is trial:
            del self.trials[trial.started.trial_id]
        self.ended.add(trial.started.trial_id)

    # --- timers, partitions ----------------------------------------------------------------------
    def periodic(self, now: float) -> None:
        if not self.loop.log.sure:
            return  # an actor's silence may be the log's: decide once it answers (or is known away)
        mono = self.loop.log.time()
        for trial in list(self.trials.values()):
            if trial.done or trial.timed_out or trial.stepping or trial.started.tick_interval_ms:
                continue  # real-time trials time out at their tick deadline instead
            if mono - trial.waiting_since >= trial.started.response_timeout_ms / 1000 and self.loop.is_live(
                EVENTS, trial.partition
            ):
                self._time_out(trial)

    def _time_out(self, trial: _Trial) -> None:
        """Write the timeouts of the actors whose action for this tick is missing (applied when read back)."""
        trial.timed_out = True
        policy = trial.started.timeout_policy
        for actor in sorted(trial.active - set(trial.actions)):
            self.loop.emit(ActorTimeout(trial.started.trial_id, tick=trial.tick, actor=actor, policy=policy))
            metrics.ACTIONS_TIMED_OUT.labels(trial.started.environment).inc()
            schemas = trial.schemas[trial.actor_class[actor]]
            if policy != "default_action" or not schemas.has_default_action:
                self.loop.emit(
                    ActorLeft(trial.started.trial_id, tick=trial.tick, actor=actor, reason="response timeout")
                )

    def unsent(self, event: Event, reason: str) -> None:
        trial = self.trials.get(event.trial_id)
        if trial is not None and not trial.done:
            self._fail(trial, f"{event.KIND} not sent: {reason}")

    def caught_up(self, role: str, partition: int) -> None:
        for trial in self.trials.values():
            if trial.partition == partition:
                self._begin_wait(trial)  # response timeouts restart from now: the old clock died with the old owner

    def revoked(self, role: str, partition: int) -> None:
        for trial in [t for t in self.trials.values() if t.partition == partition]:
            del self.trials[trial.started.trial_id]
            if not trial.stepping:  # else when its update returns (end() must not race update())
                self._end_env(trial)

    async def close(self) -> None:
        self._workers.shutdown(wait=False, cancel_futures=True)

    def runs_here(self, record: Record) -> bool:
        return record.trial_id in self.trials

    def safe_offset(self, role: str, partition: int) -> int | None:
        return safe_point(partition, self.trials.values())
