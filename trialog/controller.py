"""Controllers: whoever asks for trials to start or end — a script, the CLI, a campaign.

.. code-block:: python

    async with Controller(connect(settings), follow=TRIALS) as ctl:
        trial_id = await ctl.start_trial("rps", seed=7, implementations={"bob": "scripted"})
        ended = await ctl.wait_result(trial_id)
        print(ended.reason, ended.tick, ended.returns)

A start request goes to ``control``; the answer (``trial.started`` or
``trial.rejected`` with the reason) comes back on ``events`` and is never
silently dropped: :meth:`Controller.wait_started` raises :class:`TrialError` with
the orchestrator's reason. Rewards, messages and parameter changes from outside
(an evaluator, a person) go straight to the trial's events.

A controller that needs only how its trials end (``follow=TRIALS``: `trialog train`,
`trialog run`, `trialog trial start --wait`, the benchmarks) reads the ``trials`` index
instead — a few records per trial, where ``events`` has several per tick, every one of
which a watcher of events fetches and looks at.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from trialog.bus.base import LIFECYCLE_WAIT_MS, Bus, Consumer, Record
from trialog.errors import TrialError, TrialTimeout
from trialog.protocol.events import (
    HEADER_KIND,
    HEADER_REWARD,
    HEADER_TICK,
    Event,
    Message,
    Observation,
    ParametersChanged,
    ResolvedTrial,
    Reward,
    StartRequest,
    TerminateRequest,
    TrialEnded,
    TrialPending,
    TrialRecord,
    TrialRejected,
    TrialStarted,
    trial_id_problem,
)
from trialog.protocol.owners import check_headers, reward_problem
from trialog.protocol.rewards import Returns, reward_bounds_problem
from trialog.protocol.topics import CONTROL, EVENTS, TRIALS
from trialog.telemetry.logs import get_logger
from trialog.trust.join_tokens import mint_join_token
from trialog.trust.keys import Keyring

log = get_logger(__name__)
LIFECYCLE = frozenset({TrialPending.KIND, TrialStarted.KIND, TrialRejected.KIND, TrialEnded.KIND})


def join_link(base_url: str, keyring: Keyring, trial_id: str, actor: str, *, ttl_s: float = 24 * 3600) -> str:
    """The link a person opens to play ``actor`` in ``trial_id`` through the web gateway:
    ``<base_url>/play?token=<join token>`` (minted here, no round trip)."""
    return f"{base_url.rstrip('/')}/play?token={mint_join_token(keyring, trial_id, actor, ttl_s=ttl_s)}"


def new_trial_id(prefix: str = "trial") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@dataclass
class _Watch:
    started: asyncio.Future  # TrialStarted (following events) or the running TrialRecord (the index)
    ended: asyncio.Future  # TrialEnded, or the ended TrialRecord


@dataclass(frozen=True)
class TrialResult:
    """How a trial ended: its last tick, the reason, and per actor its return (I-4)."""

    trial_id: str
    tick: int
    reason: str
    returns: dict[str, float]


class Controller:
    """Starts, watches and ends trials through the log."""

    def __init__(self, bus: Bus, name: str = "controller", *, watch: bool = True, follow: str = EVENTS):
        """``watch=False``: a controller that only asks (starts, terminates, rewards): it reads
        no ``events`` — its consumer would fetch and look at every record of every trial — and
        cannot wait for answers (the web gateway's lobby, which follows trials in its feed).
        ``follow=TRIALS``: answers from the ``trials`` index, as the orchestrator records each
        trial — :meth:`wait_started` and :meth:`wait_ended` give the trial's
        :class:`TrialRecord` (running, ended), :meth:`watch` yields the index's records, the
        returns are those the ended record carries, and ``ticks_seen`` grows as trials end."""
        if follow not in (EVENTS, TRIALS):
            raise ValueError(f"a controller follows {EVENTS!r} or {TRIALS!r}, not {follow!r}")
        self.bus = bus
        self.name = name
        self.watching = watch
        self.follows = follow
        self._watches: dict[str, _Watch] = {}
        self._listeners: list[asyncio.Queue] = []
        self._consumer: Consumer | None = None
        self._task: asyncio.Task | None = None
        self._stopped: TrialError | None = None  # why the watch loop ended, if it failed
        self.ticks_seen = 0  # ticks reached by all trials seen, for progress figures
        self._last_tick: dict[str, int] = {}
        self._returns: dict[str, Returns] = {}  # following events: the trials this controller started

    async def __aenter__(self) -> Controller:
        await self.bus.start()
        if self.watching:
            # Events are fetched in batches, the index as each record comes (see Bus.consumer).
            self._consumer = self.bus.consumer(
                [self.follows], from_start=False, batched=self.follows == EVENTS, batch_wait_ms=LIFECYCLE_WAIT_MS
            )
            await self._consumer.start()
            self._task = asyncio.create_task(self._watch_loop())
            self._task.add_done_callback(self._watch_loop_ended)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._consumer:
            await self._consumer.stop()
        await self.bus.stop()

    # --- requests -----------------------------------------------------------------------------
    async def start_trial(
        self,
        spec: str,
        *,
        trial_id: str | None = None,
        seed: int | None = None,
        implementations: Mapping[str, str] | None = None,
        parameters: Mapping[str, Any] | None = None,
        environment: str | None = None,
        environment_config: Mapping[str, Any] | None = None,
        actors: Sequence[Mapping[str, Any]] | None = None,
        max_ticks: int | None = None,
        experiment: str = "",
        phase: str = "",
    ) -> str:
        """Ask for a trial; returns its ID at once (use :meth:`wait_started`/:meth:`wait_ended`).
        ``experiment``/``phase`` label the trial in the log (training presets set them)."""
        trial_id = new_trial_id() if trial_id is None else trial_id
        problem = trial_id_problem(trial_id)
        if problem:
            raise TrialError(f"cannot start a trial: {problem}", trial_id=trial_id, reason=problem)
        if max_ticks is not None and max_ticks < 1:
            raise TrialError(
                f"max_ticks must be at least 1, got {max_ticks}", trial_id=trial_id, reason="invalid max_ticks"
            )
        if self.watching:  # a controller that does not watch keeps nothing per trial
            self._watch(trial_id)
            if self.follows == EVENTS:
                self._returns[trial_id] = Returns({})  # its actors once it starts
        await self.bus.publish(
            CONTROL,
            StartRequest(
                trial_id,
                spec=spec,
                requested_by=self.name,
                seed=seed,
                environment=environment,
                environment_config=orjson.dumps(environment_config).decode() if environment_config else None,
                implementations=dict(implementations or {}),
                actors=orjson.dumps(list(actors)).decode() if actors else None,
                max_ticks=max_ticks,
                parameters=orjson.dumps(dict(parameters or {})).decode(),
                experiment=experiment,
                phase=phase,
            ),
        )
        return trial_id

    def join_links(self, trial_id: str, actors: Sequence[str]) -> dict[str, str]:
        """One join link per client actor (``Spec.seats`` names them), for the gateway at the
        ``gateway_url`` setting. Pure: call it right after :meth:`start_trial`, before
        waiting — the trial waits for these people to join."""
        return {
            actor: join_link(self.bus.settings.gateway_url, self.bus.trust.keyring, trial_id, actor) for actor in actors
        }

    async def terminate(self, trial_id: str, *, hard: bool = False, reason: str = "") -> None:
        """Soft: the trial ends at its next tick boundary. Hard: now."""
        await self.bus.publish(CONTROL, TerminateRequest(trial_id, hard=hard, reason=reason, requested_by=self.name))

    async def send_reward(
        self, trial_id: str, receiver: str, value: float, *, tick: int, confidence: float = 1.0,
        sender: str | None = None, user_data: Mapping[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """A reward from outside (an evaluator, a person) for ``tick`` — past ticks included.
        Raises :class:`TrialError` for a reward that could not count whatever the trial: a value
        or confidence out of bounds (:func:`trialog.protocol.rewards.reward_bounds_problem`), a
        negative tick, or ``sender`` naming itself as ``receiver``."""
        problem = reward_bounds_problem(value, confidence)
        if problem is None:
            reward = Reward(
                trial_id,
                tick=tick,
                receiver=receiver,
                value=float(value),
                confidence=float(confidence),
                sender=sender or self.name,
                user_data=None if user_data is None else orjson.dumps(user_data).decode(),
            )
            problem = reward_problem(reward, max(tick, 0), None)
        if problem is not None:
            raise TrialError(f"cannot send this reward: {problem}", trial_id=trial_id, reason="invalid_reward")
        await self.bus.publish(EVENTS, reward)

    async def send_message(
        self,
        trial_id: str,
        receivers: Sequence[str],
        payload: Mapping[str, Any],
        *,
        tick: int = 0,
        sender: str | None = None,
    ) -> None:
        await self.bus.publish(
            EVENTS,
            Message(trial_id, tick=tick, sender=sender or self.name, receivers=tuple(receivers),
                    message_id=uuid.uuid4().hex, payload=orjson.dumps(payload).decode()),
        )  # fmt: skip

    async def change_parameters(self, trial_id: str, parameters: Mapping[str, Any], *, tick: int = 0) -> None:
        """Parameters take effect before the environment's update of ``tick`` (or its next
        update, if that tick is past). Logged, so replay reproduces the change."""
        await self.bus.publish(
            EVENTS,
            ParametersChanged(trial_id, tick=tick, sender=self.name, parameters=orjson.dumps(parameters).decode()),
        )

    # --- answers ------------------------------------------------------------------------------
    def _watch(self, trial_id: str) -> _Watch:
        if not self.watching:
            raise TrialError(f"controller {self.name!r} does not watch the log (watch=False)", trial_id=trial_id)
        w = self._watches.get(trial_id)
        if w is None:
            loop = asyncio.get_running_loop()
            w = self._watches[trial_id] = _Watch(loop.create_future(), loop.create_future())
            if self._stopped is not None:
                self._fail(w, self._stopped)
        return w

    async def wait_started(self, trial_id: str, timeout: float | None = 60) -> TrialStarted:
        """The resolved trial; raises :class:`TrialError` with the reason if it was rejected,
        :class:`TrialTimeout` if no orchestrator answered within ``timeout`` seconds."""
        try:
            return await asyncio.wait_for(asyncio.shield(self._watch(trial_id).started), timeout)
        except TimeoutError:
            raise TrialTimeout(
                f"no orchestrator answered the start of trial {trial_id} within {timeout:g} s: "
                "is `trialog serve orchestrator` running with that spec, "
                f"on topics {self.bus.settings.topic('control')} (same prefix and bootstrap servers)?",
                trial_id=trial_id,
                reason="no answer",
            ) from None

    async def wait_ended(self, trial_id: str, timeout: float | None = None) -> TrialEnded:
        return await asyncio.wait_for(asyncio.shield(self._watch(trial_id).ended), timeout)

    async def wait_result(self, trial_id: str, timeout: float | None = None) -> TrialResult:
        """How the trial ended, with its returns — whichever topic this controller follows."""
        ended = await self.wait_ended(trial_id, timeout)
        tick = ended.ticks if isinstance(ended, TrialRecord) else ended.tick
        return TrialResult(trial_id, tick, ended.reason, self.returns(trial_id))

    def returns(self, trial_id: str) -> dict[str, float]:
        """Per actor, the sum over ticks of the aggregated reward (I-4) seen so far (trials
        started by this controller; following the index, those its ended record carries)."""
        ended = self._ended(trial_id)
        if isinstance(ended, TrialRecord):
            return dict(ended.returns)
        r = self._returns.get(trial_id)
        return {} if r is None else r.totals(None if ended is None else ended.tick)

    def _ended(self, trial_id: str) -> TrialEnded | TrialRecord | None:
        w = self._watches.get(trial_id)
        if w is None or not w.ended.done() or w.ended.cancelled() or w.ended.exception() is not None:
            return None
        return w.ended.result()

    def last_tick(self, trial_id: str) -> int:
        return self._last_tick.get(trial_id, 0)

    async def watch(self) -> AsyncIterator[Event]:
        """Lifecycle events (pending, started, rejected, ended) of every trial, as they happen."""
        if not self.watching:
            raise TrialError(f"controller {self.name!r} does not watch the log (watch=False)")
        if self._stopped is not None:
            raise self._stopped
        queue: asyncio.Queue = asyncio.Queue()
        self._listeners.append(queue)
        try:
            while True:
                event = await queue.get()
                if isinstance(event, TrialError):
                    raise event
                yield event
        finally:
            self._listeners.remove(queue)

    async def _watch_loop(self) -> None:
        assert self._consumer is not None
        see = self._see if self.follows == EVENTS else self._see_index
        while True:
            for record in await self._consumer.poll(timeout_ms=500):
                see(record)

    def _watch_loop_ended(self, task: asyncio.Task) -> None:
        """A watch loop that failed (an error of the Kafka client it could not get past) fails
        every wait on it, now and later, with the error: a caller is told, not left waiting for
        trials it can no longer see."""
        if task.cancelled() or (error := task.exception()) is None:
            return
        self._stopped = TrialError(f"controller {self.name!r} stopped reading the log: {type(error).__name__}: {error}")
        log.error("controller stopped reading the log", controller=self.name, error=repr(error))
        for w in self._watches.values():
            self._fail(w, self._stopped)
        for q in self._listeners:
            q.put_nowait(self._stopped)

    def _see_index(self, record: Record) -> None:
        if self.bus.refusal(record) is not None:
            return  # forged: not the orchestrator's
        try:
            r = self.bus.codec.decode(record.value, TrialRecord.KIND)
        except Exception:
            return
        for q in self._listeners:
            q.put_nowait(r)
        w = self._watches.get(r.trial_id)
        if w is None:
            return
        if r.status == "rejected":
            self._fail(w, TrialError(f"trial {r.trial_id} rejected: {r.reason}", trial_id=r.trial_id, reason=r.reason))
            return
        if r.status == "running" and not w.started.done():
            w.started.set_result(r)
        elif r.status == "ended":  # with no running record first, it never ran
            if not w.ended.done():
                self.ticks_seen += r.ticks
            self._end(w, r)

    @staticmethod
    def _end(w: _Watch, ended: TrialEnded | TrialRecord) -> None:
        if not w.started.done():
            w.started.set_exception(
                TrialError(
                    f"trial {ended.trial_id} ended before it started: {ended.reason}",
                    trial_id=ended.trial_id,
                    reason=ended.reason,
                )
            )
            w.started.exception()
        if not w.ended.done():
            w.ended.set_result(ended)

    @staticmethod
    def _fail(w: _Watch, error: TrialError) -> None:
        for f in (w.started, w.ended):
            if not f.done():
                f.set_exception(error)
                f.exception()  # mark retrieved: a caller may wait on only one of them

    def _see(self, record: Record) -> None:
        kind = record.header(HEADER_KIND)
        if kind == Observation.KIND:
            if record.header(HEADER_REWARD) is not None and record.trial_id in self._returns:
                # The environment's reward it carries counts as the record it stands for, logged just
                # before it: the observation is decoded only when its header says so, in a trial counted here.
                observation = self._genuine(record, kind)
                if isinstance(observation, Observation) and observation.reward is not None:
                    self._count(record.trial_id, observation.carried_reward())
            tick = int(record.header(HEADER_TICK) or 0)
            last = self._last_tick.get(record.trial_id, 0)
            if tick > last:
                self.ticks_seen += tick - last
                self._last_tick[record.trial_id] = tick
            return
        if kind == Reward.KIND and record.trial_id in self._returns:
            r = self._genuine(record, kind)
            if isinstance(r, Reward):
                self._count(record.trial_id, r)
            return
        if kind not in LIFECYCLE or self.bus.refusal(record) is not None:
            return
        try:
            event = self.bus.codec.decode(record.value, kind)
        except Exception:
            return  # the orchestrator dead-letters bad records; a watcher just skips them
        if isinstance(event, ResolvedTrial):
            self.bus.trust.learn(event)  # so this process can write as (or to) the trial's actors
        for q in self._listeners:
            q.put_nowait(event)
        w = self._watches.get(event.trial_id)
        if w is None:
            return
        if isinstance(event, TrialStarted) and not w.started.done():
            if event.trial_id in self._returns:
                self._returns[event.trial_id].actors = {a.name: a.actor_class for a in event.actors}
            w.started.set_result(event)
        elif isinstance(event, TrialRejected):
            tid, reason = event.trial_id, event.reason
            self._fail(w, TrialError(f"trial {tid} rejected: {reason}", trial_id=tid, reason=reason))
        elif isinstance(event, TrialEnded):
            self._end(w, event)

    def _genuine(self, record: Record, kind: str) -> Event | None:
        """The record's event if it counts: tagged by a key allowed to write it, decoded, its
        headers saying what its body says; else None (forged or bad: its owner dead-letters it)."""
        if self.bus.refusal(record) is not None:
            return None
        try:
            event = self.bus.codec.decode(record.value, kind)
            check_headers(record.key, record.headers, event)
        except Exception:
            return None
        return event

    def _count(self, trial_id: str, reward: Reward) -> None:
        returns = self._returns[trial_id]
        if reward_problem(reward, self._last_tick.get(trial_id, 0), returns.actors or None) is None:
            returns.add(reward)  # counted as the datalog counts it

    # --- the index ------------------------------------------------------------------------------
    async def trial_record(self, trial_id: str) -> TrialRecord | None:
        """The trial's latest record in the ``trials`` index, if any."""
        return next((r for r in await self.list_trials() if r.trial_id == trial_id), None)

    async def list_trials(self) -> list[TrialRecord]:
        """The latest record of every trial in the ``trials`` index."""
        latest = await self.bus.read_latest(TRIALS, lambda value: self.bus.codec.decode(value, TrialRecord.KIND))
        return sorted(latest.values(), key=lambda r: r.created_ms)


# --- campaigns ------------------------------------------------------------------------------------


@dataclass
class TrialOutcome:
    trial_id: str
    overrides: dict[str, Any]
    reason: str = ""
    ticks: int = 0
    error: str = ""
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        """Rejected, unanswered, or ended by an error."""
        return bool(self.error) or self.reason == "error"


@dataclass
class CampaignResult:
    outcomes: list[TrialOutcome] = field(default_factory=list)
    seconds: float = 0.0
    ticks_seen: int = 0

    def by_reason(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for o in self.outcomes:
            counts[o.reason or "rejected"] += 1
        return dict(counts)

    @property
    def ticks(self) -> int:
        return sum(o.ticks for o in self.outcomes)


Progress = Callable[[int, int, int, float], None]  # done, running, total, ticks per second


async def run_campaign(
    ctl: Controller,
    spec: str,
    trials: int,
    concurrency: int,
    *,
    overrides: Callable[[int], Mapping[str, Any]] | None = None,
    on_progress: Progress | None = None,
    trial_timeout: float | None = 600,
) -> CampaignResult:
    """Run ``trials`` trials of ``spec``, at most ``concurrency`` at once."""
    result = CampaignResult()
    semaphore = asyncio.Semaphore(concurrency)
    running = 0
    start = time.monotonic()
    seen_at_start = ctl.ticks_seen

    def report() -> None:
        if on_progress:
            elapsed = max(time.monotonic() - start, 1e-9)
            on_progress(len(result.outcomes), running, trials, (ctl.ticks_seen - seen_at_start) / elapsed)

    async def one(i: int) -> None:
        nonlocal running
        extra = dict(overrides(i)) if overrides else {}
        async with semaphore:
            running += 1
            t0 = time.monotonic()
            outcome = TrialOutcome("", extra)
            try:
                outcome.trial_id = await ctl.start_trial(spec, **extra)
                ended = await ctl.wait_result(outcome.trial_id, timeout=trial_timeout)
                outcome.reason, outcome.ticks = ended.reason, ended.tick
            except TrialError as exc:
                outcome.error = exc.reason or str(exc)
            except TimeoutError:
                outcome.error = f"no end within {trial_timeout} s"
            outcome.seconds = time.monotonic() - t0
            running -= 1
            result.outcomes.append(outcome)
            report()

    async def ticker() -> None:
        while True:
            await asyncio.sleep(1.0)
            report()

    progress_task = asyncio.create_task(ticker())
    try:
        await asyncio.gather(*(one(i) for i in range(trials)))
    finally:
        progress_task.cancel()
    result.seconds = time.monotonic() - start
    result.ticks_seen = ctl.ticks_seen - seen_at_start
    return result
