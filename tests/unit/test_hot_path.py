"""What keeps a tick cheap: tags by precomputed HMAC keys, records read back as written
without a second decoding, and user code moved off the event loop only while it is slow."""

from __future__ import annotations

import asyncio
import hmac
import statistics
import time

import pytest

from tests.unit.test_trust import STARTED
from trialog.bus.memory import MemoryBus
from trialog.controller import Controller
from trialog.protocol.events import Message, Observation
from trialog.protocol.topics import EVENTS, TRIALS
from trialog.runtime.handler import Handler
from trialog.runtime.log_watch import LogWatch
from trialog.runtime.pace import Pace
from trialog.runtime.service import TURN_EVERY_S, ServiceLoop
from trialog.trust.keys import Keyring
from trialog.trust.tags import MacKey


def _trusting_bus(settings) -> MemoryBus:
    """An in-memory bus with a keyring, that knows STARTED's trial (its records are tagged)."""
    bus = MemoryBus(settings)
    bus.trust.keyring = Keyring.generate()
    bus.trust.learn(STARTED)
    return bus


@pytest.mark.parametrize("size", [0, 1, 32, 64, 65, 200])
def test_mac_key_is_hmac_sha256(size):
    secret = bytes(range(size % 256))[:size] or b""
    for message in (b"", b"x", bytes(1000)):
        assert MacKey(secret).tag(message) == hmac.digest(secret, message, "sha256")


def test_pace_moves_calls_that_wait_off_the_loop_on_most_calls_not_one():
    pace = Pace(0.002)
    for seconds in (
        0.050,
        0.0001,
        0.0001,
        0.0001,
        0.0001,
        0.050,
        0.0001,
    ):  # a slow first call; one stretched by preemption
        pace.record(seconds, 0.00005)
        assert not pace.off_loop
    for _ in range(3):  # slow calls that wait (sleep, I/O, native code): off the loop
        pace.record(0.010, 0.0001)
    assert pace.off_loop
    pace.record(0.001, 0.0001)  # quicker, but still waiting past a quarter of the threshold: stays off
    pace.record(0.001, 0.0001)
    assert pace.off_loop
    for _ in range(3):
        pace.record(0.0001, 0.00005)
    assert not pace.off_loop


def test_pace_moves_long_waits_off_the_loop_whatever_a_wake_up_costs_in_cpu():
    pace = Pace(0.005)
    for _ in range(3):  # a quarter-second sleep whose thread's CPU clock gained 1.3 ms (a virtual machine's wake-up)
        pace.record(0.25, 0.0013)
    assert pace.off_loop


def test_pace_keeps_calls_that_compute_inline_however_long():
    pace = Pace(0.002)
    for _ in range(10):  # Python computing, stretched by a busy machine: a thread would only take turns
        pace.record(0.025, 0.004)
    assert not pace.off_loop


def test_pace_times_calls_and_waits_for_a_few_before_moving():
    pace = Pace(0.001)
    assert pace.timed(lambda a, b: a + b, 1, 2) == 3
    pace.timed(time.sleep, 0.01)
    assert not pace.off_loop  # one quick call and one slow one: too few to judge
    pace.timed(time.sleep, 0.01)
    assert not pace.off_loop  # the CPU clock is read only after a slow call: one of three seen waiting
    pace.timed(time.sleep, 0.01)
    assert pace.off_loop  # two of four slow and waiting
    while pace.off_loop:  # computing calls bring it back
        pace.timed(sum, range(200_000))


class Recorder(Handler):
    topics = (EVENTS,)
    service_name = "recorder"

    def __init__(self):
        self.handled: list = []

    def handle(self, record, event):
        self.handled.append((record.offset, event))


async def test_a_record_read_back_as_written_is_not_decoded_again_and_a_copy_is(memory_settings):
    bus = _trusting_bus(memory_settings)
    handler = Recorder()
    loop = ServiceLoop(bus, handler, group="recorder")
    decoded = []
    decode = bus.codec.decode
    bus.codec.decode = lambda value, kind: decoded.append(kind) or decode(value, kind)
    task = asyncio.create_task(loop.run())
    await loop.ready.wait()
    sent = Observation(STARTED.trial_id, tick=0, actor="alice", payload=b"\x00")
    loop.emit(sent)
    while len(handler.handled) < 1:
        await asyncio.sleep(0.01)
    assert handler.handled[0][1] is sent and decoded == []
    # The same body with other headers (here: no tags) is not the record this loop wrote.
    original = bus.records(EVENTS)[-1]
    await bus.send_many(
        [(EVENTS, original.key, original.value, [h for h in original.headers if not h[0].startswith("mac.")])]
    )
    other = Message(STARTED.trial_id, tick=0, sender="alice", receivers=("bob",), payload="{}", message_id="m1")
    loop.emit(other)
    while len(handler.handled) < 2:
        await asyncio.sleep(0.01)
    loop.stop()
    await task
    assert [e for _, e in handler.handled] == [sent, other]  # the untagged copy was refused
    assert decoded == []  # and refused before decoding


class Answerer(Recorder):
    """Answers every message with one of its own; ``meddle`` writes a stranger's record
    to the log just before the answer (another service's, landing between)."""

    def __init__(self, meddle=None):
        super().__init__()
        self.meddle = meddle

    def handle(self, record, event):
        super().handle(record, event)
        if isinstance(event, Message) and event.sender == "alice":
            if self.meddle:
                self.meddle()
            answer = f"a-{event.message_id}"
            self.loop.emit(
                Message(event.trial_id, tick=0, sender="bob", receivers=("alice",), payload="{}", message_id=answer)
            )


async def _answered(bus, handler, expect: int, *, slow_reader=False, asked=1):
    """Run ``handler`` in a loop, publish ``asked`` messages of alice's at once, wait for
    ``expect`` records handled: ((the loop's position, the consumer's), the (first, after)
    of each skip). ``slow_reader``: the loop reads nothing more until the answer is in the
    log (a fetch still on its way while the answer is written)."""
    loop = ServiceLoop(bus, handler, group="answerer")
    skipped = []
    task = asyncio.create_task(loop.run())
    await loop.ready.wait()
    skip, poll = loop.consumer.skip_written, loop.consumer.poll
    log = bus.logs[EVENTS][bus.partition_of(STARTED.trial_id)]

    def recorded(role, partition, first, after):
        done = skip(role, partition, first, after)
        if done:
            skipped.append((first, after))
        return done

    async def slow_poll(timeout_ms=100, max_records=None):
        if handler.handled and not any(r.header("sender") == "bob" for r in log):
            await asyncio.sleep(0.01)
            return []
        return await poll(timeout_ms, max_records)

    loop.consumer.skip_written = recorded
    if slow_reader:
        loop.consumer.poll = slow_poll
    await bus.publish_all(
        EVENTS,
        [
            Message(STARTED.trial_id, tick=0, sender="alice", receivers=("bob",), payload="{}", message_id=f"q{i}")
            for i in range(asked)
        ],
    )
    while len(handler.handled) < expect:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # nothing more comes
    p = bus.partition_of(STARTED.trial_id)
    position = (loop.position(EVENTS, p), loop.consumer.position_hint(EVENTS, p))
    loop.stop()
    await task
    return position, skipped


async def test_a_loop_handles_what_it_writes_as_read_back_without_fetching_it(memory_settings):
    bus = _trusting_bus(memory_settings)
    handler = Answerer()
    position, skipped = await _answered(bus, handler, 2)
    # The answer is the next record of the log: handled as read back, once, in log order,
    # and the consumer went on after it rather than read it again.
    assert [(o, e.sender) for o, e in handler.handled] == [(0, "alice"), (1, "bob")]
    assert skipped == [(1, 2)]
    assert position == (2, 2) and len(bus.records(EVENTS)) == 2


async def test_a_loop_that_reads_many_records_a_poll_still_skips_what_it_wrote(memory_settings):
    # Trials in lockstep (a training run's 26 in flight) read a dozen records a poll and
    # answer them all at once: their answers are still the next records of the log.
    bus = _trusting_bus(memory_settings)
    handler = Answerer()
    position, skipped = await _answered(bus, handler, 24, asked=12)
    assert [e.sender for _, e in handler.handled] == ["alice"] * 12 + ["bob"] * 12
    assert [o for o, _ in handler.handled] == list(range(24))
    assert skipped == [(12, 24)]
    assert position == (24, 24) and len(bus.records(EVENTS)) == 24


async def test_a_loop_reads_what_it_wrote_when_another_record_came_first(memory_settings):
    bus = _trusting_bus(memory_settings)
    stranger = Message(STARTED.trial_id, tick=0, sender="carol", receivers=("bob",), payload="{}", message_id="s")
    record = bus.to_record(EVENTS, stranger)
    log = bus.logs[EVENTS][bus.partition_of(STARTED.trial_id)]
    handler = Answerer(meddle=lambda: log.append(_logged(log, record)))
    position, skipped = await _answered(bus, handler, 3, slow_reader=True)
    # The stranger's record lies between the last one read and the answer: nothing is
    # skipped, and all three are handled once, in log order.
    assert [(o, e.sender) for o, e in handler.handled] == [(0, "alice"), (1, "carol"), (2, "bob")]
    assert skipped == [] and position == (3, 3)


def _logged(log, item):
    """A record as the in-memory bus would log it next, there."""
    from trialog.bus.base import Record

    role, key, value, headers = item
    return Record(role, log[0].partition, len(log), key, value, tuple(headers), 0)


class OrchestratorLoop:
    """Stands in for the ServiceLoop around an orchestrator handler: emitted events are
    written to the in-memory bus (tagged, as the loop would) and fed back by the test."""

    def __init__(self, bus):
        self.bus = bus
        self.emitted: list = []

    def emit(self, event, role=EVENTS):
        self.emitted.append((role, event))

    def is_live(self, role, partition):
        return True

    log = LogWatch("orchestrator")  # never watched: the log never away here

    def dead_letter(self, record, reason):
        raise AssertionError(reason)


def _written(bus, role, event, offset=0):
    from trialog.bus.base import Record

    _, key, value, headers = bus.to_record(role, event)
    return Record(role, 0, offset, key, value, tuple(headers), 0)


def test_the_orchestrator_checks_the_record_that_moves_a_trial_and_the_rest_only_when_it_looks_inactive(
    memory_settings,
):
    from pathlib import Path

    from trialog.protocol.events import Action, StartRequest
    from trialog.protocol.topics import CONTROL
    from trialog.services.orchestrator.handler import OrchestratorHandler
    from trialog.spec import load_spec

    bus = MemoryBus(memory_settings)
    spec = load_spec(Path(__file__).resolve().parents[2] / "examples" / "rps" / "spec.yaml", bus.store)
    handler = OrchestratorHandler({spec.name: spec})
    handler.loop = loop = OrchestratorLoop(bus)
    request = StartRequest("t-pace", spec="rps", requested_by="test", parameters="{}")
    handler.handle(_written(bus, CONTROL, request), request)
    for role, event in list(loop.emitted):
        if role == EVENTS:
            handler.handle(_written(bus, EVENTS, event), event)
    trial = handler.live_trials["t-pace"]
    assert trial.status == "running" and trial.environment_deadline is not None

    def glance(event, forged=False):
        record = _written(bus, EVENTS, event)
        if forged:  # the same record with its tags stripped
            record = type(record)(
                record.role,
                0,
                0,
                record.key,
                record.value,
                tuple(h for h in record.headers if not h[0].startswith("mac.")),
                0,
            )
        handler.saw_undecoded(record, event.KIND)

    glance(Observation("t-pace", tick=0, actor="alice", payload=b""))
    assert trial.environment_deadline is None  # the first observation counts at once
    glance(Observation("t-pace", tick=1000, actor="alice", payload=b""), forged=True)
    assert trial.tick == 0  # a forged tick moves nothing (it would end the trial past max_ticks)
    glance(Observation("t-pace", tick=1, actor="alice", payload=b""))
    assert trial.tick == 1
    # Actions count as activity, their tags checked only when the trial looks inactive.
    trial.last_activity -= 3600
    glance(Action("t-pace", tick=1, actor="alice", payload=b""), forged=True)
    handler.periodic(time.time())
    assert trial.end_sent  # a forged action does not keep it alive
    trial.end_sent = False
    trial.last_activity -= 3600
    glance(Action("t-pace", tick=1, actor="alice", payload=b""))
    handler.periodic(time.time())
    assert not trial.end_sent


class SlowRecorder(Recorder):
    def handle(self, record, event):
        time.sleep(0.0005)  # inline user code: a long backlog keeps the loop busy for a while
        super().handle(record, event)


async def test_the_loop_gives_other_tasks_a_turn_through_a_long_backlog(memory_settings):
    """Heartbeats run in tasks of the same event loop: a backlog served from records already
    fetched must not starve them (the group would drop the member), nor get a turn per poll
    (each poll's outputs would then go out in a produce request of their own)."""
    bus = _trusting_bus(memory_settings)
    backlog = 1600  # about a second of handling, 32 records per flush
    await bus.publish_all(
        EVENTS,
        [
            Message(STARTED.trial_id, tick=0, sender="alice", receivers=("bob",), payload="{}", message_id=f"m{i}")
            for i in range(backlog)
        ],
    )
    handler = SlowRecorder()
    loop = ServiceLoop(bus, handler, group="recorder")
    turns: list[tuple[float, int]] = []  # (when, records handled) at each turn mid-backlog

    async def heartbeat():
        while True:
            await asyncio.sleep(0)
            if 0 < len(handler.handled) < backlog:
                turns.append((time.monotonic(), len(handler.handled)))

    beat = asyncio.create_task(heartbeat())
    task = asyncio.create_task(loop.run())
    while len(handler.handled) < backlog:
        await asyncio.sleep(0.01)
    loop.stop()
    await task
    beat.cancel()
    gaps = [b[0] - a[0] for a, b in zip(turns, turns[1:])]
    # A turn every 50 ms (TURN_EVERY_S); a loop without turns holds them off for the whole
    # backlog (0.8 s of sleeps alone). 0.5 s leaves room for one collection of a big test
    # process's heap (a full CI run saw one gap of 0.31 s among gaps of 0.06 s).
    assert gaps and max(gaps) < 0.5, f"other tasks waited {max(gaps, default=0):.2f} s for a turn"
    # Not a turn per poll: turns come TURN_EVERY_S apart, where a poll of 32 records takes 16–25 ms
    # here. Judged by the gaps, not by a count of turns: a slow machine makes each poll, and so
    # the backlog, longer (a slow CI run counted 25 turns in 50 polls), never the gaps shorter.
    across_polls = [b[0] - a[0] for a, b in zip(turns, turns[1:]) if b[1] != a[1]]
    assert across_polls, "no turn came between two polls of the backlog"
    apart = statistics.median(across_polls)
    assert apart >= 0.8 * TURN_EVERY_S, f"turns {apart * 1000:.0f} ms apart (median), not {TURN_EVERY_S * 1000:.0f}"


@pytest.mark.parametrize(("follows", "gathers"), [(EVENTS, True), (TRIALS, False)])
async def test_a_controller_has_fetches_of_events_gathered_and_the_index_taken_as_it_comes(
    memory_settings, follows, gathers
):
    """Events have several records a tick: a controller following them lets each fetch wait for
    a batch. The trials index has a few records a trial: there such fetches came back empty 50
    times a second, ten times the CPU of a reader answered at each record (docs/performance.md)."""
    bus = MemoryBus(memory_settings)
    asked = []
    make = bus.consumer

    def consumer(roles, **options):
        asked.append((tuple(roles), options.get("batched", False)))
        return make(roles, **options)

    bus.consumer = consumer
    async with Controller(bus, follow=follows):
        pass
    assert asked == [((follows,), gathers)]
