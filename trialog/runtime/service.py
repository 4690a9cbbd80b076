"""The loop every Trialog service runs: consume, handle, emit — and rebuild from the log.

A service is a consumer group over some topics plus a :class:`~trialog.runtime.handler.Handler` holding the
state of the trials on the partitions it owns. This module does the parts that are
the same for the orchestrator, environment hosts and actor hosts:

**Rebuilding (I-7).** A service commits, per partition, not "what I have read" but
the *safe point*: the offset of the oldest live trial's first event. When a
partition is assigned (start, crash of another instance, rebalance), the loop
seeks to that safe point and replays the log up to the end offset it found at
assignment — the *catch-up*. During catch-up the handler runs exactly as live,
but what it emits is not sent: it is set aside as *expected*, and crossed off
when the same event (same trial and identity, I-8) shows up in the log. When
catch-up ends, whatever was expected and never logged — the work the dead
instance did not finish — is sent. Replayed outputs that differ from the logged
ones are reported (the environment's determinism check).

**Recalling an ended trial (I-7).** The safe point moves past a trial once it has
ended, so a new owner of the partition never reads it; yet a retroactive reward for it
may come any time. A handler that must judge such a record as the trial's earlier owner
did defines :meth:`Handler.recall`: the loop awaits what it returns — reading the
trial's ``trial.started`` and ``trial.ended`` from the log, where the ``trials`` index
says they are — before it checks and handles the record, in log order.

**Emitting.** ``emit`` buffers; one flusher sends buffered events in order in one
round trip, so a handler that emits several events for one input costs one hop.

**Bad records (I-8).** A record is decoded before anything acts on it. A record
that does not decode or that its handler rejects (:class:`trialog.errors.BadRecord`)
is dead-lettered by the one service that owns it (:mod:`trialog.protocol.owners`) and
skipped by the others; nothing stops the loop.

**Who wrote it (I-9).** Before a record is decoded, its tags are checked
(:mod:`trialog.trust`); a record that was not written by a key allowed to write
it, or whose headers disagree with its body, never reaches the handler: its
owner dead-letters it with the reason ("refused: …").
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from trialog.bus.base import Bus, Consumer, Record
from trialog.errors import CodecError, RecordsTooLarge, TransportError, TrialogError
from trialog.protocol.events import (
    BY_KIND,
    HEADER_KIND,
    HEADER_REWARD,
    Event,
    Observation,
    ResolvedTrial,
    Reward,
    identity_from_headers,
)
from trialog.protocol.in_place import TickBodies
from trialog.protocol.owners import check_headers
from trialog.protocol.topics import EVENTS
from trialog.runtime.handler import Handler
from trialog.runtime.log_watch import LogWatch
from trialog.telemetry import metrics
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)

_JUDGED = "judged="  # commit metadata: the offset up to which this group judged a partition's records


def _judged(mark: str) -> int:
    return int(mark[len(_JUDGED) :]) if mark.startswith(_JUDGED) and mark[len(_JUDGED) :].isdigit() else 0


# Records a loop wrote and has not read back yet, the most it remembers (see ServiceLoop._not_read_back).
NOT_READ_BACK_KEPT = 100_000
TURN_EVERY_S = 0.05  # the longest the loop handles records without giving the event loop a turn
RECORDS_PER_FLUSH = 32  # records handled between two flushes, the most one poll returns (measured: docs/performance.md)
HOLD_BACKOFF_MAX = 1024  # the most emits that go without holding their partition after a skip failed (_read_own)
RETRY_BACKOFF_MAX_S = 2.0  # the longest wait between two attempts to publish while Kafka refuses


def retry_backoff(attempt: int) -> float:
    """Seconds to wait before publishing again after ``attempt`` refusals (from 0): doubling
    from 0.1 s up to RETRY_BACKOFF_MAX_S, for any number of attempts (a float cannot hold
    2**1024, which a broker away for half an hour would reach)."""
    return min(RETRY_BACKOFF_MAX_S, 0.1 * 2 ** min(attempt, 16))


@dataclass
class _Partition:
    end: int  # end offset when assigned: catching up until the position reaches it
    position: int = 0
    live: bool = False
    expected: dict[tuple, bytes] = field(default_factory=dict)  # (trial, identity) -> encoded value
    expected_order: list[tuple[tuple, Event]] = field(default_factory=list)
    judged: int = 0  # records before this offset were judged (and bad ones dead-lettered) by a previous owner
    mismatches: int = 0


class ServiceLoop:
    """Runs one handler over one consumer group until stopped."""

    def __init__(self, bus: Bus, handler: Handler, group: str | None, *, tick_interval: float = 0.2):
        self.bus = bus
        self.handler = handler
        # Rewards an observation carries (Observation.carried_reward) reach the handlers that decode rewards.
        self._takes_rewards = not handler.folds_carried_rewards and (
            handler.kinds is None or Reward.KIND in handler.kinds
        )
        self.group = group
        self.tick_interval = tick_interval
        # Observations and actions read in place, not decoded then checked: the same events, for less (TickBodies).
        self._bodies = TickBodies(bus.store)
        handler.loop = self
        self.parts: dict[tuple[str, int], _Partition] = {}
        self._out: list[tuple[str, Event]] = []
        self._flushing: asyncio.Task | None = None
        self._letters: set[asyncio.Task] = set()  # dead letters being sent
        self._committing: asyncio.Task | None = None  # the periodic commit under way (see run)
        self._gave_up = False  # outputs given up while stopping: nothing may be committed any more
        # Records this loop wrote, until it reads them back: (key, value) -> (headers, event).
        # A record read back byte for byte is the event this loop sent: it is handled as sent,
        # not decoded and verified again (an environment reads back its observations, the
        # orchestrator its lifecycle records: a third of what a tick costs otherwise).
        self._not_read_back: dict[tuple[bytes, bytes], tuple[tuple, Event]] = {}
        self._stopping = asyncio.Event()
        self._writing_since: float | None = None  # monotonic start of the writes under way (see _watch_log)
        self._sending = 0  # events in the write under way
        self.log = LogWatch(handler.service_name)  # is the log there; the clock deadlines are measured on
        self._recalls = type(handler).recall is not Handler.recall  # see Handler.recall
        # On the tick path, a record this loop writes to a partition it reads is handled as read
        # back without fetching it back: the consumer holds its fetches while the record is on
        # its way, and skips past it once acknowledged, if it is the next to read (_read_own).
        # However many records a poll returns: trials in lockstep answer a poll's records at
        # once, and their answers are still the next to read (measured: docs/performance.md);
        # where others write in between, the backoff holds less often.
        self._reads_own = not handler.batched
        self._hold_backoff = 0  # after a skip failed: how many emits go without holding (doubling, see _read_own)
        self._unheld = 0  # emits left to go without holding
        self._held: set[int] = set()  # events partitions written to while fetches are held (until acknowledged)
        self.consumer: Consumer | None = None
        self.ready = asyncio.Event()  # set once the first assignment's catch-up is done
        self.turned_at = time.monotonic()  # end of the last turn of the loop: liveness (trialog.runtime.process)
        metrics.watch_loop(self)

    # --- what handlers call ------------------------------------------------------------------
    def emit(self, event: Event, role: str = EVENTS) -> None:
        """Send an event (set aside instead while its partition is catching up)."""
        if role == EVENTS:
            p = self.bus.partition_of(event.trial_id)
            part = self.parts.get((EVENTS, p))
            if part is not None:
                if not part.live:
                    key = (event.trial_id, event.identity)
                    if key not in part.expected:
                        part.expected[key] = self.bus.codec.encode(event)
                        part.expected_order.append((key, event))
                    return
                if self._reads_own and p not in self._held:
                    if self._unheld:
                        self._unheld -= 1
                    elif self._held or self.consumer.hold():
                        self._held.add(p)
        self._out.append((role, event))
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.get_running_loop().create_task(self._flush())

    def position(self, role: str, partition: int) -> int:
        """The next offset this loop will read in a partition it owns."""
        return self.parts[(role, partition)].position

    def is_live(self, role: str, partition: int) -> bool:
        part = self.parts.get((role, partition))
        return part is not None and part.live

    def stop(self) -> None:
        self._stopping.set()

    # --- the loop ------------------------------------------------------------------------------
    async def run(self) -> None:
        self.consumer = self.bus.consumer(
            self.handler.topics,
            group=self.group,
            on_assigned=self._on_assigned,
            on_revoked=self._on_revoked,
            batched=self.handler.batched,
            batch_wait_ms=self.handler.batch_wait_ms,
        )
        await self.consumer.start()
        if self.group is None:  # a plain reader owns everything from the start
            await self._on_assigned(self.consumer.assignment())
        last_periodic = 0.0
        last_commit = last_turn = time.monotonic()
        try:
            while not self._stopping.is_set():
                # A few records per flush: outputs go out after each poll's records, so that the
                # next service in the tick starts on them while this one handles the rest (trials
                # of a busy host would otherwise move in lockstep, one side idle while the other works).
                timeout_ms = int(self.tick_interval * 1000)
                records = await self.consumer.poll(timeout_ms=timeout_ms, max_records=RECORDS_PER_FLUSH)
                for record in records:
                    if self._recalls:
                        await self._recall(record)
                    self._process(record)
                if records:
                    self.handler.polled()
                now = time.monotonic()
                # A poll served from records already fetched returns without giving the event
                # loop a turn: through a long catch-up (inline updates, in log order) the
                # consumer's heartbeats would stop, the group drop this member, and the
                # catch-up start over at every rejoin. A turn now and then lets them through;
                # not one per poll: the producer would then send each poll's outputs in a
                # request of their own (measured: twice the produce requests at 64 trials).
                if now - last_turn >= TURN_EVERY_S:
                    last_turn = now
                    await asyncio.sleep(0)
                self._check_caught_up()
                if now - last_periodic >= self.tick_interval:
                    last_periodic = now
                    self._watch_log(now)  # seconds matter here, not turns: off the per-record path
                    self.handler.periodic(time.time())
                if now - last_commit >= 1.0 and self.group and (self._committing is None or self._committing.done()):
                    # Beside the loop, not in it: a commit waits inside the Kafka client until the
                    # group's coordinator answers, for as long as a lost one takes to move (~10 s),
                    # while the partitions' leaders may well be there. Awaited here, it stalled
                    # the tick (an actor's action late past its deadline). Offsets are taken when
                    # it runs; one at a time, so an older one never lands after a newer one.
                    last_commit = now
                    self._committing = asyncio.get_running_loop().create_task(self._commit())
                self.turned_at = now
        finally:
            self.log.close()
            await self._drain_and_commit()
            await self.consumer.stop()
            await self.handler.close()

    async def _recall(self, record: Record) -> None:
        part = self.parts.get((record.role, record.partition))
        if part is None or record.problem is not None or 0 <= record.offset < part.judged:
            return  # revoked, unreadable, or judged by a previous owner: nothing to decide
        waiting = self.handler.recall(record, record.header(HEADER_KIND))
        if waiting is not None:
            try:
                await waiting
            except Exception:  # the record is judged on what the handler knows, as before
                log.exception(
                    "recalling a trial from the log failed", service=self.handler.service_name, trial=record.trial_id
                )

    def _process(self, record: Record) -> None:
        key = (record.role, record.partition)
        part = self.parts.get(key)
        if part is None:  # revoked meanwhile
            return
        part.position = record.next_offset
        kind = record.header(HEADER_KIND)
        owned = self.handler.must_judge(record, kind)
        if record.problem is not None:  # a batch the consumer could not read, skipped
            if owned:
                self.dead_letter(record, record.problem)
            return
        if not part.live and part.expected and record.role == EVENTS:
            self._cross_off(part, record)
        if not owned:  # someone else's to judge: decode only what this service needs
            kinds = self.handler.kinds
            if kinds is not None and kind is not None and kind not in kinds and not self._carries(record, kind):
                self.handler.saw_undecoded(record, kind)
                return
            if not self.handler.should_decode(record, kind):
                return
        written = self._not_read_back.pop((record.key, record.value), None) if self._not_read_back else None
        if written is not None and written[0] == record.headers:
            event = written[1]
        else:
            event = self._verified(record, owned, kind)
            if event is None:
                return
        if isinstance(event, ResolvedTrial):
            self.bus.trust.learn(event)
        elif self._takes_rewards and type(event) is Observation and event.reward is not None:
            # The reward it carries first, as the record it stands for would have come before it.
            # Never lettered for it: a valid observation's carried reward counts (see carried_reward).
            self.handle(record, event.carried_reward(), Reward.KIND, False)
        self.handle(record, event, kind, owned)

    def _carries(self, record: Record, kind: str) -> bool:
        """Is this an observation carrying a reward, for a handler that decodes rewards?"""
        return self._takes_rewards and kind == Observation.KIND and record.header(HEADER_REWARD) is not None

    def handle(self, record: Record, event: Event, kind: str | None, owned: bool) -> None:
        """Hand a record to the handler, with the one rule for what a handler raises: a record
        it rejects (:class:`~trialog.errors.TrialogError`, e.g. ``BadRecord``) is dead-lettered
        if this service owns it, else noted; anything else is a bug — in user code, most often —
        and is logged: a service that hosts many trials does not stop for one. For handlers too,
        when they handle a record later than the loop gave it to them (the environment runtime's
        records that waited for an update)."""
        try:
            self.handler.handle(record, event)
        except TrialogError as exc:
            if owned:
                self.dead_letter(record, str(exc))
            else:
                log.warning(
                    "event rejected",
                    service=self.handler.service_name,
                    trial=record.trial_id,
                    kind=kind,
                    error=str(exc),
                )
        except Exception:  # a bug in user code must not stop a service that hosts many trials
            log.exception("handler failed", service=self.handler.service_name, trial=record.trial_id, kind=kind)

    def verified(self, record: Record, kind: str | None) -> Event | None:
        """A record its handler set aside undecoded (``should_decode``), checked and decoded now
        as when it was read: its event, or None if it does not count."""
        return self._verified(record, self.handler.must_judge(record, kind), kind)

    def _verified(self, record: Record, owned: bool, kind: str | None) -> Event | None:
        """The record's event if it is tagged by a key allowed to write it, decodes, and its
        headers say what its body says; else None (dead-lettered, if this service owns it)."""
        h = dict(record.headers)  # as the tag check and check_headers read them: the last of a name counts
        refused = self.bus.refusal(record, h)
        if refused is not None:
            self._refuse(record, owned, kind, refused)
            return None
        event = self._bodies.event(record.key, h, record.value, kind)  # a tick's record, read in place
        if event is not None:
            return event
        try:
            event = self.bus.codec.decode(record.value, kind)
        except CodecError as exc:
            reason = f"undecodable record: {exc}"
            self.handler.undecodable(record, reason)
            if owned:
                self.dead_letter(record, reason)
            return None
        try:
            check_headers(record.key, record.headers, event)
        except CodecError as exc:
            self._refuse(record, owned, kind, str(exc))
            return None
        return event

    def _refuse(self, record: Record, owned: bool, kind: str | None, reason: str) -> None:
        """A record that must not count: dead-lettered by its owner, skipped by the others."""
        if owned:
            self.dead_letter(record, f"refused: {reason}")
        else:
            log.debug(
                "record refused", service=self.handler.service_name, trial=record.trial_id, kind=kind, reason=reason
            )

    def _cross_off(self, part: _Partition, record: Record) -> None:
        key = (record.trial_id, identity_from_headers(record.headers))
        expected = part.expected.pop(key, None)
        if expected is None:
            return
        if expected != record.value:
            part.mismatches += 1
            log.warning(
                "replayed event differs from the log (non-deterministic environment or actor?)",
                trial=record.trial_id,
                identity=key[1],
                offset=record.offset,
            )

    async def _dead_letter(self, record: Record, reason: str) -> None:
        try:
            await self.bus.dead_letter(record, reason, self.handler.service_name)
            kind = record.header(HEADER_KIND)
            metrics.DEAD_LETTERS.labels(
                self.handler.service_name, kind if kind in BY_KIND else "unknown", metrics.reason_category(reason)
            ).inc()
            log.warning(
                "record dead-lettered",
                trial=record.trial_id,
                reason=reason,
                topic=record.role,
                partition=record.partition,
                offset=record.offset,
            )
        except TrialogError as exc:
            log.error("could not dead-letter a record", reason=reason, error=str(exc))

    def dead_letter(self, record: Record, reason: str) -> None:
        """For handlers: park a record they own and cannot use (e.g. an action that does not
        match its schema). Not for a record the partition's previous owner already judged
        (catch-up re-reads them; the committed metadata says how far it got): once each."""
        part = self.parts.get((record.role, record.partition))
        if part is not None and 0 <= record.offset < part.judged:
            return
        task = asyncio.get_running_loop().create_task(self._dead_letter(record, reason))
        self._letters.add(task)
        task.add_done_callback(self._letters.discard)

    def _unsent(self, item: tuple, event: Event, reason: str) -> None:
        role, key, _value, headers = item
        log.error("event not sent: too large for its topic", trial=event.trial_id, kind=event.KIND, reason=reason)
        partition = self.bus.partition_of(event.trial_id) if key else 0
        # Never written, so no offset: the letter keeps the headers and the reason.
        self.dead_letter(Record(role, partition, -1, key, None, tuple(headers), int(time.time() * 1000)), reason)
        try:
            self.handler.unsent(event, reason)
        except Exception:
            log.exception("handler failed on an unsent event", service=self.handler.service_name, trial=event.trial_id)

    def _check_caught_up(self) -> None:
        if self.ready.is_set():
            return  # every partition is live; _on_assigned clears this
        for (role, p), part in self.parts.items():
            if not part.live and part.position >= part.end:
                self._go_live(role, p, part)
        if self.parts and all(part.live for part in self.parts.values()):
            self.ready.set()

    def _go_live(self, role: str, p: int, part: _Partition) -> None:
        part.live = True
        unsent = [(k, e) for k, e in part.expected_order if k in part.expected]
        part.expected.clear()
        part.expected_order.clear()
        if unsent:
            log.info("catch-up finished; sending work the previous owner did not", partition=p, events=len(unsent))
        for _, event in unsent:
            self.emit(event)
        if part.mismatches:
            log.warning("catch-up found differences with the log", partition=p, mismatches=part.mismatches)
        self.handler.caught_up(role, p)

    async def _on_assigned(self, assigned: set[tuple[str, int]]) -> None:
        assert self.consumer is not None
        ends = await self.consumer.end_offsets(assigned)
        for role, p in sorted(assigned):
            start, mark = await self.consumer.committed(role, p) if self.group else (0, "")
            start = start or 0
            self.consumer.seek(role, p, start)
            self.parts[(role, p)] = _Partition(end=ends[(role, p)], position=start, judged=_judged(mark))
            self.handler.assigned(role, p)
            log.info(
                "partition assigned",
                service=self.handler.service_name,
                topic=role,
                partition=p,
                resume_from=start,
                catch_up_to=ends[(role, p)],
            )
        self.ready.clear()

    async def _on_revoked(self, revoked: set[tuple[str, int]]) -> None:
        await self._drain_and_commit()
        for role, p in revoked:
            self.parts.pop((role, p), None)
            self.handler.revoked(role, p)

    async def _drain_and_commit(self) -> None:
        """Before letting partitions go: everything sent, and the safe points committed."""
        await self._drain()
        if self._committing is not None:
            await self._committing  # the periodic one lands first: never after this newer one
        if self.group:
            try:
                await self._commit()
            except TrialogError:
                pass  # the next owner resumes from the previous commit: more catch-up, nothing lost

    async def _commit(self) -> None:
        assert self.consumer is not None
        if self._out or (self._flushing and not self._flushing.done()) or self._letters or self._gave_up:
            return  # outputs or letters not yet acknowledged (or given up): committing now could lose them
        offsets = {}
        for (role, p), part in self.parts.items():
            if not part.live:
                continue
            safe = self.handler.safe_offset(role, p)
            offset = min(part.position, safe) if safe is not None else part.position
            offsets[(role, p)] = (offset, f"{_JUDGED}{max(part.position, part.judged)}")
        try:
            await self.consumer.commit(offsets)
        except TransportError as exc:
            log.info("commit skipped", reason=str(exc))

    def _watch_log(self, now: float) -> None:
        writing = now - self._writing_since if self._writing_since is not None else 0.0
        self.log.watch(now, max(self.consumer.unanswered_s(), writing), self._sending + len(self._out))

    async def _flush(self) -> None:
        try:
            await self._send_out()
        finally:
            self._writing_since = None
            if self._held:
                self._held.clear()
                self.consumer.release()

    def _read_own(self, records: list[tuple], delivered: list) -> None:
        """Handle the records just written to a held partition as read back, when they are the
        next records to read there (nothing else was logged between the last record read and
        them), and have the consumer go on after them: in log order, as if fetched. Otherwise
        they are fetched and read back as usual."""
        by_partition: dict[int, list[tuple[tuple, object]]] = {}
        for record, d in zip(records, delivered):
            if record[0] == EVENTS and d.partition in self._held:
                by_partition.setdefault(d.partition, []).append((record, d))
        for p, written in by_partition.items():
            part = self.parts.get((EVENTS, p))
            first = written[0][1].offset
            after = written[-1][1].offset + 1
            if (
                part is None
                or not part.live
                or part.position != first
                or after - first != len(written)  # someone else's record among them
                or not self.consumer.skip_written(EVENTS, p, first, after)
            ):
                # Others write here between this loop's reads (a busy partition): holding it only
                # delays their records, so hold less often for a while (doubling while it lasts).
                self._hold_backoff = min(HOLD_BACKOFF_MAX, 2 * self._hold_backoff or 1)
                self._unheld = self._hold_backoff
                continue
            self._hold_backoff = 0
            for (_role, key, value, headers), d in written:
                stamp = d.timestamp_ms if d.timestamp_ms >= 0 else int(time.time() * 1000)
                self._process(Record(EVENTS, p, d.offset, key, value, tuple(headers), stamp))

    async def _send_out(self) -> None:
        if self._writing_since is None:
            self._writing_since = time.monotonic()
        while self._out:
            batch, self._out = self._out, []
            records, events = [], []  # aligned: an event that cannot be written has no record
            kinds = self.handler.kinds
            if len(self._not_read_back) > NOT_READ_BACK_KEPT:  # records never read back (e.g. a partition moved)
                self._not_read_back.clear()
            for role, event in batch:
                try:
                    record = self.bus.to_record(role, event)
                except TrialogError as exc:  # e.g. no key to write it with: say so, keep serving
                    log.error(
                        "cannot write an event",
                        service=self.handler.service_name,
                        trial=event.trial_id,
                        kind=event.KIND,
                        error=str(exc),
                    )
                    continue
                records.append(record)
                events.append(event)
                if role in self.handler.topics and (kinds is None or event.KIND in kinds):
                    self._not_read_back[(record[1], record[2])] = (tuple(record[3]), event)
            self._sending = len(records)
            for attempt in itertools.count():
                try:
                    delivered = await self.bus.send_many(records)
                    if self._held:
                        self._read_own(records, delivered)
                    break
                except RecordsTooLarge as exc:  # the others were delivered
                    for i, reason in exc.refused.items():
                        self._unsent(records[i], events[i], reason)
                    break
                except TransportError as exc:
                    # Until they are sent, nothing is committed past the records they answer
                    # (see _commit). A service that is stopping gives them up and never
                    # commits again: the next owner resumes before them and redoes the work.
                    if self._stopping.is_set():
                        self._gave_up = True
                        log.error(
                            "publish failed while stopping: the next owner of these partitions redoes the work",
                            events=len(batch),
                            error=str(exc),
                        )
                        return
                    if attempt == 0:  # the later attempts are counted (metrics), and a stall is said once
                        log.warning("publish failed; retrying", error=str(exc))
                    metrics.PUBLISH_RETRIES.labels(self.handler.service_name).inc()
                    await asyncio.sleep(retry_backoff(attempt))

    async def _drain(self) -> None:
        while self._flushing is not None and not self._flushing.done():
            await self._flushing
        if self._letters:
            await asyncio.gather(*self._letters, return_exceptions=True)


async def run_until_stopped(loops: Iterable[ServiceLoop], stop: asyncio.Event) -> None:
    """Run several loops (e.g. one per implementation) until ``stop`` is set or one fails."""
    tasks = [asyncio.create_task(loop.run()) for loop in loops]
    waiter = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([*tasks, waiter], return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            if t is not waiter and t.exception():
                raise t.exception()
    finally:
        for loop in loops:
            loop.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        waiter.cancel()
