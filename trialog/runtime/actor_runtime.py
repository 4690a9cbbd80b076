"""The actor runtime: plays every actor of a trial whose implementation it serves.

An implementation is a decide-style class (:class:`trialog.actor.Agent` or any
class with ``decide``), a batched :class:`trialog.actor.Policy`, or a session
coroutine ``async def run(session)``. Each implementation is one consumer group
(``actors.<implementation>``), so it scales on its own; one host process may serve
several.

The observations of one poll (up to :data:`trialog.runtime.service.RECORDS_PER_FLUSH`
records; all trials) are decided in one call, as soon as the loop has handled them
(:meth:`ActorHandler.polled`), so that their actions leave in the same turn of the event
loop. While such calls of an implementation are slow and mostly wait
(:mod:`trialog.runtime.pace`), they run off the event loop, in one worker thread per
implementation, while the loop goes on reading: a slow implementation slows only its own
trials, and a fast one does not pay a thread hop (about 0.1 ms) on every tick. A policy's
calls always run in the worker, in order with its model loads. During catch-up
(I-7) they run inline instead, so that replayed actions are compared with the log.
A policy that follows a model gets each newer version from ``models`` (loaded in
the same worker thread, between two batches) and its actions record the version. A trial
may pin a version for one of its actors instead (:mod:`trialog.runtime.pinned`).

Observations arrive decoded into the actor class's types; rewards — retroactive
ones included — and messages are delivered live as they are read from the log. The rewards
and messages a decide-style agent sends (:mod:`trialog.runtime.actor_session`) are written
after its ``decide`` returns, before its action, or after the hook that sent them.

An actor that cannot play — its constructor or its session raised — says so in a message
(:mod:`trialog.protocol.cannot_play`), and the orchestrator ends the trial at once with the
reason, rather than the environment timing the actor out tick after tick.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from trialog.actor import (
    ActorEvent,
    Agent,
    DecideRequest,
    EndEvent,
    MessageEvent,
    ObservationEvent,
    Policy,
    RewardEvent,
)
from trialog.bus.base import Record
from trialog.environment import ActorInfo, TrialInfo
from trialog.errors import BadRecord, CodecError, TrialogError
from trialog.model_registry import ModelFollower, ModelVersion, parse_ref
from trialog.protocol.cannot_play import cannot_play
from trialog.protocol.events import (
    HEADER_RECEIVER,
    Action,
    Event,
    Message,
    Observation,
    Reward,
    TrialEnded,
    TrialStarted,
)
from trialog.protocol.inbox import Received
from trialog.protocol.owners import message_problem, reward_problem
from trialog.protocol.roles import ACTORS
from trialog.protocol.topics import EVENTS
from trialog.protocol.trial import (
    ClassSchemas,
    class_schemas,
    loads,
    reaches,
    trial_info,
)
from trialog.runtime.actor_session import Outbox, Session
from trialog.runtime.handler import Handler, safe_point
from trialog.runtime.pace import Pace
from trialog.runtime.pinned import Pin, PinnedVersions, pin_of
from trialog.runtime.recent import RecentlyEnded
from trialog.spec import load_entry
from trialog.telemetry import metrics
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)

T = TypeVar("T")


_NO_ACTION = object()  # a decide() that raised
# Rewards of a trial kept unread (no actor here takes them as they come) before they are read
# anyway: read, each is a few numbers in the actors' inboxes; unread, the whole record.
UNREAD_REWARDS_KEPT = 4096


@dataclass
class _Played:
    """One actor this host plays in one trial."""

    info: ActorInfo
    schemas: ClassSchemas
    agent: Any = None  # decide-style instance
    outbox: Outbox | None = None  # the decide-style agent's rewards and messages, until written
    session: Session | None = None
    task: asyncio.Task | None = None
    last_answered: int = -1
    received: Received = field(default_factory=Received)  # each reward and message once; probes
    pin: Pin | None = None  # the model version its trial pins for it (another policy decides)


def _hooks_rewards(agent: Any) -> bool:
    """Whether a decide-style agent does something with a reward (overrides ``on_reward``)."""
    hook = getattr(agent, "on_reward", None)
    return hook is not None and getattr(hook, "__func__", None) is not Agent.on_reward


@dataclass
class _Trial:
    started: TrialStarted
    info: TrialInfo
    partition: int
    start_offset: int
    mine: frozenset[str]  # the actors this implementation plays (whether or not they started)
    classes: dict[str, str]  # every actor of the trial -> its class (what rewards and messages may address)
    actors: dict[str, _Played] = field(default_factory=dict)
    tick: int = 0  # the latest tick observed: rewards and messages for later ticks do not count
    said_cannot_play: bool = False  # an actor of it cannot play, and this service said so
    # Whether an actor here takes rewards as they come (a session, or an agent's on_reward). If none
    # does, its rewards are read only when a probe asks what the actors received: policies never
    # see them, and checking and decoding each was a seventh of the actor service's CPU (PPO).
    takes_rewards: bool = True
    # (record, the tick observed then, the reward it carried if an observation: decoded with it)
    unread_rewards: list[tuple[Record, int, Reward | None]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Pending:
    """An observation waiting for its action."""

    trial: _Trial
    played: _Played
    tick: int
    observation: Any


class ActorHandler(Handler):
    """Plays one actor implementation."""

    kinds = frozenset({TrialStarted.KIND, Observation.KIND, Reward.KIND, Message.KIND, TrialEnded.KIND})
    owner_role = ACTORS
    service_name = "actors"

    def __init__(self, implementation: str, entry: str | Any, config: Mapping[str, Any] | None = None):
        self.implementation = implementation
        self.target = (
            load_entry(entry, what=f"actor implementation {implementation}") if isinstance(entry, str) else entry
        )
        self.session_style = inspect.iscoroutinefunction(self.target)
        is_class = inspect.isclass(self.target)
        if not self.session_style and not (
            is_class and (hasattr(self.target, "decide") or issubclass(self.target, Policy))
        ):
            raise TrialogError(
                f"actor implementation {implementation}: {entry!r} must be a class with decide(observation), "
                "a trialog.actor.Policy, or an `async def run(session)` coroutine function"
            )
        self._config = dict(config or {})
        self.policy: Policy | None = (
            self.target(dict(self._config)) if is_class and issubclass(self.target, Policy) else None
        )
        self.service_name = f"actors.{implementation}"
        self.trials: dict[str, _Trial] = {}
        # One worker thread per implementation: decisions (and model loads) in order, off the loop.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"decide-{implementation}")
        self._pending: list[_Pending] = []
        self._deciding: asyncio.Task | None = None
        self._in_worker = False  # a batch is being decided in the worker thread: the next waits for it
        self._worker_tail: Future | None = None  # the last call handed to the worker (done: it is idle)
        self.pace = Pace()  # inline, or in the worker while its calls are slow and wait
        self._follower: ModelFollower | None = None
        # The model the policy follows; `model: NAME@VERSION` pins a version: played, not the newest.
        self._model, self._pin = parse_ref(self.policy.model) if self.policy and self.policy.model else ("", None)
        self.pinned = PinnedVersions(implementation, lambda: self.target(dict(self._config)))
        self.batches = 0  # decide calls made (one per batch), for tests and metrics
        self.ended: RecentlyEnded[None] = RecentlyEnded()  # a repeated trial.started changes nothing

    def runs_here(self, record: Record) -> bool:
        trial = self.trials.get(record.trial_id)
        return trial is not None and record.header(HEADER_RECEIVER) in trial.mine

    def should_decode(self, record: Record, kind: str | None) -> bool:
        if kind == TrialStarted.KIND:
            return True
        trial = self.trials.get(record.trial_id)
        if trial is None:
            return False
        if kind == Reward.KIND and not trial.takes_rewards:
            self._set_aside(trial, record, None)
            return False
        return kind != Observation.KIND or record.header(HEADER_RECEIVER) in trial.actors

    def handle(self, record: Record, event: Event) -> None:
        if isinstance(event, TrialStarted):
            if event.trial_id not in self.trials and event.trial_id not in self.ended:
                self._start(record, event)
            return
        trial = self.trials.get(event.trial_id)
        if trial is None:
            return
        match event:
            case Observation(actor=name) if name in trial.actors:
                trial.tick = max(trial.tick, event.tick)
                self._on_observation(trial, trial.actors[name], event)
            case Reward() if not trial.takes_rewards:  # carried by an observation: set aside, as a record is
                self._set_aside(trial, record, event)
            case Reward():
                self._on_reward(trial, event, trial.tick)
            case Message() if message_problem(event, trial.tick, trial.classes):
                pass  # not counted: its owner (the orchestrator) dead-letters it
            case Message():
                self._read_rewards(trial)  # a probe's answer lists them, in log order
                payload = loads(event.payload)
                for played in trial.actors.values():
                    if any(
                        reaches(r, event.sender, played.info.name, played.info.actor_class) for r in event.receivers
                    ):
                        deliver, probe_answer = played.received.message(event, played.info.name, payload)
                        if deliver:
                            self._deliver(played, MessageEvent(event.tick, event.sender, payload))
                        if probe_answer is not None:
                            self.loop.emit(probe_answer)
            case TrialEnded():
                for played in trial.actors.values():
                    self._deliver(played, EndEvent(event.tick, event.reason))
                del self.trials[event.trial_id]
                self.ended.add(event.trial_id)
                if self.policy is not None:
                    self._to_worker(self.policy.trial_ended, event.trial_id)
                    for pin in {p.pin for p in trial.actors.values() if p.pin is not None}:
                        if (pinned := self.pinned.policy(pin)) is not None:
                            self._to_worker(pinned.trial_ended, event.trial_id)
                self._release(trial)

    def _start(self, record: Record, started: TrialStarted) -> None:
        mine = [a for a in started.actors if a.implementation == self.implementation and not a.client]
        if not mine:
            return
        info = trial_info(started)
        schemas = class_schemas(self.loop.bus.store, started)
        trial = _Trial(
            started,
            info,
            record.partition,
            record.offset,
            frozenset(a.name for a in mine),
            {a.name: a.actor_class for a in started.actors},
        )
        failed: dict[str, str] = {}  # actor -> why it could not start
        for actor in info.actors:
            if actor.name not in {a.name for a in mine}:
                continue
            played = _Played(actor, schemas[actor.actor_class])
            try:
                if self.session_style:
                    played.session = Session(self.loop, info, actor, played.schemas)
                    played.task = asyncio.get_running_loop().create_task(self._run_session(played))
                elif self.policy is None:
                    played.agent = self.target(info, actor)
                    played.agent.observation_schema = played.schemas.observation_json
                    played.agent.action_schema = played.schemas.action_json
                    played.agent.outbox = played.outbox = Outbox(info, actor)
                else:
                    played.pin = pin_of(self.policy.model, actor)
            except Exception as exc:
                log.exception("actor failed to start", trial=started.trial_id, actor=actor.name)
                failed[actor.name] = f"actor {actor.name} could not start: {type(exc).__name__}: {exc}"
                continue
            trial.actors[actor.name] = played
            if played.pin is not None and (policy := self.pinned.use(played.pin)) is not None:
                self._to_worker(self._load_pinned, played.pin, policy)
        trial.takes_rewards = any(p.session is not None or _hooks_rewards(p.agent) for p in trial.actors.values())
        self.trials[started.trial_id] = trial
        if failed:
            self._cannot_play(trial, next(iter(failed)), "; ".join(failed.values()))

    async def _run_session(self, played: _Played) -> None:
        try:
            await self.target(played.session)
        except Exception as exc:
            trial_id = played.session.trial.trial_id
            log.exception("actor session failed", trial=trial_id, actor=played.info.name)
            trial = self.trials.get(trial_id)
            if trial is not None:
                self._cannot_play(
                    trial, played.info.name, f"actor {played.info.name} failed: {type(exc).__name__}: {exc}"
                )

    def _cannot_play(self, trial: _Trial, actor: str, reason: str) -> None:
        """Say that an actor of this trial cannot play: the orchestrator ends the trial at once
        (:mod:`trialog.protocol.cannot_play`). Once per trial from this service. Emitted like any
        output: during a catch-up, set aside and sent only if the log lacks it."""
        if not trial.said_cannot_play:
            trial.said_cannot_play = True
            self.loop.emit(cannot_play(trial.info.trial_id, trial.tick, actor, reason))

    def _on_observation(self, trial: _Trial, played: _Played, obs: Observation) -> None:
        if obs.tick <= played.last_answered:
            return  # a repeat, or a retry of an earlier tick: the actor answered it already
        try:
            value = self.loop.bus.store.decode(obs.payload, played.schemas.observation)
        except CodecError as exc:
            raise BadRecord(
                f"observation of {played.info.name} at tick {obs.tick} does not match its schema: {exc}"
            ) from None
        event = ObservationEvent(obs.tick, value, obs.terminated, obs.truncated, obs.final)
        played.last_answered = obs.tick
        if played.session is not None:
            played.session.push(event)
            return
        if obs.final:
            return
        pending = _Pending(trial, played, obs.tick, value)
        if not self.loop.is_live(EVENTS, trial.partition):
            self._emit_decisions([pending], *self._decide([pending]))  # catch-up: compared with the log in order
            return
        self._pending.append(pending)
        if self._deciding is None or self._deciding.done():
            self._deciding = asyncio.get_running_loop().create_task(self._decide_pending())

    def polled(self) -> None:
        """Decide a poll's observations before the loop gives the event loop a turn — when they
        are decided inline: their actions leave in the flush of this turn, one hop sooner
        than from a task of their own (which then finds nothing left)."""
        if self._pending and not self._in_worker and not self._decides_in_worker:
            self._decide_here()

    @property
    def _decides_in_worker(self) -> bool:
        """The next batch goes to the worker thread: while slow and waiting, and for a policy while
        the worker has a call of it to finish (its model loads and trial ends run there: its calls
        stay in order). Handing a fast policy's batch to a thread costs more than deciding it: a
        queue, a wake-up and the loop's self-pipe per batch."""
        return self.pace.off_loop or (self.policy is not None and not self._worker_idle)

    @property
    def _worker_idle(self) -> bool:
        # One thread takes calls in order: once the last one handed over is done, all are.
        return self._worker_tail is None or self._worker_tail.done()

    def _to_worker(self, call: Callable[..., T], *args) -> Future[T]:
        self._worker_tail = self._worker.submit(call, *args)
        return self._worker_tail

    def _decide_here(self) -> None:
        batch, self._pending = self._pending, []
        self._emit_decisions(batch, *self.pace.timed(self._decide, batch))

    async def _decide_pending(self) -> None:
        """Decide what is pending in one call (in the worker thread once slow); what
        arrives meanwhile is the next batch."""
        while self._pending:
            if not self._decides_in_worker:
                self._decide_here()
                continue
            batch, self._pending = self._pending, []
            self._in_worker = True
            try:
                decided = await asyncio.wrap_future(self._to_worker(self.pace.timed, self._decide, batch))
            finally:
                self._in_worker = False
            self._emit_decisions(batch, *decided)

    def _decide(self, batch: list[_Pending]) -> tuple[list[bytes | None], list[int | None], list[list[Event]]]:
        """In the worker thread: the actions of a batch, encoded (None where there is none),
        their model versions, and the rewards and messages each decide sent."""
        self.batches += 1
        sent: list[list[Event]] = [[] for _ in batch]
        if self.policy is not None:
            actions, versions = self._decide_policies(batch)
        else:
            actions, versions = [], []
            for i, p in enumerate(batch):
                p.played.outbox.tick = p.tick
                try:
                    actions.append(p.played.agent.decide(p.observation))
                except Exception as exc:
                    log.error(
                        "actor did not produce an action",
                        trial=p.trial.info.trial_id,
                        actor=p.played.info.name,
                        tick=p.tick,
                        error=f"{type(exc).__name__}: {exc}",
                    )
                    actions.append(_NO_ACTION)
                versions.append(getattr(p.played.agent, "policy_version", None))
                sent[i] = p.played.outbox.take()  # valid when sent, even by a decide that then raised
        payloads: list[bytes | None] = []
        for p, action in zip(batch, actions):
            if action is _NO_ACTION:
                payloads.append(None)
                continue
            try:
                payloads.append(p.played.schemas.action.encode(action))
            except CodecError as exc:
                log.error(
                    "action does not match the action schema",
                    trial=p.trial.info.trial_id,
                    actor=p.played.info.name,
                    tick=p.tick,
                    error=str(exc),
                )
                payloads.append(None)
        return payloads, versions, sent

    def _decide_policies(self, batch: list[_Pending]) -> tuple[list[Any], list[int | None]]:
        """A policy's actions for a batch: one call per policy (the followed one, and one per
        version the batch's trials pin); no action where a policy failed or its pin could not load."""
        actions: list[Any] = [_NO_ACTION] * len(batch)
        versions: list[int | None] = [None] * len(batch)
        groups: dict[int, tuple[Policy, list[int]]] = {}
        if not self.pinned.pinned:  # the common case, on every tick: one policy decides the whole batch
            groups[id(self.policy)] = (self.policy, list(range(len(batch))))
        else:
            for i, p in enumerate(batch):
                policy = self.policy if p.played.pin is None else self.pinned.policy(p.played.pin)
                if policy is None:
                    continue  # its trial is over here, or cannot play (the pinned version did not load)
                groups.setdefault(id(policy), (policy, []))[1].append(i)
        for policy, indices in groups.values():
            try:
                requests = [
                    DecideRequest(p.trial.info, p.played.info, p.tick, p.observation)
                    for p in map(batch.__getitem__, indices)
                ]
                chosen = list(policy.decide_batch(requests))
                if len(chosen) != len(indices):
                    raise TrialogError(f"decide_batch returned {len(chosen)} actions for {len(indices)} requests")
            except Exception as exc:  # the policy's bug: no actions; the environment's timeout policy takes over
                log.error(
                    "policy did not decide",
                    implementation=self.implementation,
                    requests=len(indices),
                    error=f"{type(exc).__name__}: {exc}",
                )
                continue
            for i, action in zip(indices, chosen):
                actions[i], versions[i] = action, policy.policy_version
        return actions, versions

    def _emit_decisions(
        self,
        batch: list[_Pending],
        payloads: list[bytes | None],
        versions: list[int | None],
        sent: list[list[Event]],
    ) -> None:
        for p, payload, version, events in zip(batch, payloads, versions, sent):
            if self.trials.get(p.trial.info.trial_id) is not p.trial:
                continue  # the trial ended / moved meanwhile
            for event in events:  # before the action: the environment reads them before it steps
                self.loop.emit(event)
            if payload is None:
                continue  # no action: the timeout policy applies
            self.loop.emit(
                Action(
                    p.trial.info.trial_id,
                    tick=p.tick,
                    actor=p.played.info.name,
                    payload=payload,
                    policy_version=version,
                )
            )

    # --- models ---------------------------------------------------------------------------------
    def assigned(self, role: str, partition: int) -> None:
        if self._model and self._follower is None:
            self._follower = ModelFollower(self.loop.bus, self._on_model, {self._model: self._pin})
            self._follower.start()

    def _on_model(self, version: ModelVersion) -> None:
        if version.model == self._model:
            self.pinned.remember(version)  # for trials that pin it
            self._to_worker(self._load, version)

    def _load_pinned(self, pin: Pin, policy: Policy) -> None:
        """In the worker thread; a version that does not load: its trials cannot play."""
        reason = self.pinned.load(pin, policy, self.loop.bus)
        if reason:
            self.pinned.event_loop.call_soon_threadsafe(self._pin_failed, pin, reason)

    def _pin_failed(self, pin: Pin, reason: str) -> None:
        self.pinned.failed(pin, reason)
        for trial in list(self.trials.values()):
            for played in trial.actors.values():
                if played.pin == pin:
                    self._cannot_play(trial, played.info.name, reason)

    def _release(self, trial: _Trial) -> None:
        for played in trial.actors.values():
            if played.pin is not None:
                self.pinned.release(played.pin)

    def _load(self, version: ModelVersion) -> None:
        """In the worker thread, between two batches."""
        try:
            self.policy.load(version)
            self.policy.policy_version = version.version
            metrics.MODEL_VERSION.labels(self.implementation).set(version.version)
            log.info(
                "model version loaded", implementation=self.implementation, model=version.model, version=version.version
            )
        except Exception as exc:
            log.error(
                "model version not loaded; keeping the previous one",
                model=version.model,
                version=version.version,
                error=f"{type(exc).__name__}: {exc}",
            )

    async def close(self) -> None:
        if self._follower is not None:
            await self._follower.stop()
        self._worker.shutdown(wait=False, cancel_futures=True)

    def _on_reward(self, trial: _Trial, event: Reward, tick: int) -> None:
        """A reward read when the trial's latest observed tick was ``tick``: each actor it
        reaches records it once and takes it (rewards for later ticks do not count: their
        owner, the orchestrator, dead-letters them)."""
        if reward_problem(event, tick, trial.classes):
            return
        for played in trial.actors.values():
            if reaches(event.receiver, event.sender, played.info.name, played.info.actor_class) and (
                played.received.reward(event)
            ):
                user_data = loads(event.user_data) if event.user_data else None
                self._deliver(played, RewardEvent(event.tick, event.value, event.confidence, event.sender, user_data))

    def _set_aside(self, trial: _Trial, record: Record, carried: Reward | None) -> None:
        """No actor here takes rewards as they come: keep it, to read if a probe asks (:meth:`_read_rewards`)."""
        trial.unread_rewards.append((record, trial.tick, carried))
        if len(trial.unread_rewards) >= UNREAD_REWARDS_KEPT:
            self._read_rewards(trial)

    def _read_rewards(self, trial: _Trial) -> None:
        """The rewards set aside unread (no actor here takes them as they come), checked and
        decoded now as the loop would have, in log order."""
        unread, trial.unread_rewards = trial.unread_rewards, []
        for record, tick, carried in unread:
            event = carried or self.loop.verified(record, Reward.KIND)
            if isinstance(event, Reward):
                self._on_reward(trial, event, tick)

    def _deliver(self, played: _Played, event: ActorEvent) -> None:
        if played.session is not None:
            played.session.push(event)
            return
        hook = {RewardEvent: "on_reward", MessageEvent: "on_message", EndEvent: "on_end"}[type(event)]
        method = getattr(played.agent, hook, None)
        if method is not None:
            try:
                method(event)
            except Exception:
                log.exception("actor hook failed", actor=played.info.name, hook=hook)
            for sent in played.outbox.take():
                self.loop.emit(sent)

    def revoked(self, role: str, partition: int) -> None:
        for trial_id in [t for t, trial in self.trials.items() if trial.partition == partition]:
            for played in self.trials[trial_id].actors.values():
                if played.task is not None:
                    played.task.cancel()
            self._release(self.trials.pop(trial_id))

    def safe_offset(self, role: str, partition: int) -> int | None:
        return safe_point(partition, self.trials.values())
