"""A page's catch-up: the trial's history up to where the partition ended when the page
subscribed, however long it waited for its round; what came after reaches it through the
tail. Every record of the trial reaches it once, in order. Pages that wait together share
one read of the partition, and one that leaves or does not read holds no other back."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from trialog.bus.memory import MemoryBus
from trialog.protocol.events import TrialRecord
from trialog.protocol.topics import EVENTS, TRIALS
from trialog.services.gateway.door import LIMITED, SLOW, Limits, Refused
from trialog.services.gateway.feed import CAUGHT_UP, Feed
from trialog.settings import Settings


async def _write(bus: MemoryBus, trial_id: str, n: int, start: int = 0) -> None:
    await bus.send_many([(EVENTS, trial_id.encode(), f"{trial_id}-{i}".encode(), []) for i in range(start, start + n)])


async def _index(bus: MemoryBus, trial_id: str) -> None:
    p = bus.partition_of(trial_id)
    start = len(bus.logs[EVENTS][p])
    record = TrialRecord(trial_id, status="running", partition=p, start_offset=start)
    await bus.send_many([(TRIALS, trial_id.encode(), bus.codec.encode(record), [])])


class _Readers:
    """The bus's catch-up readers (the tail reads every partition; a reader one), counted and
    held at a gate: ``polled`` is the records each of their polls returned."""

    def __init__(self, bus: MemoryBus):
        self.polled: list[int] = []
        self.gate = asyncio.Event()
        self.gate.set()
        consumer = bus.consumer

        def gated(roles, **kwargs):
            c = consumer(roles, **kwargs)
            if kwargs.get("partitions") is not None:
                poll = c.poll

                async def counted(*args, **kw):
                    await self.gate.wait()
                    got = await poll(*args, **kw)
                    self.polled.append(len(got))
                    return got

                c.poll = counted
            return c

        bus.consumer = gated


async def _bus() -> tuple[MemoryBus, _Readers]:
    bus = MemoryBus(Settings.load({"partitions": 1}, environ={}))
    await bus.create_topics()
    return bus, _Readers(bus)


async def _history(records) -> list[bytes]:
    """A subscription's records up to CAUGHT_UP (its history), as values."""
    out = []
    while (record := await asyncio.wait_for(anext(records), 5)) is not CAUGHT_UP:
        out.append(record.value)
    return out


async def test_a_catch_up_that_waited_reads_only_to_the_end_at_subscription():
    bus, readers = await _bus()
    for trial in ("a", "b"):
        await _index(bus, trial)
        await _write(bus, trial, 3)
    async with Feed(bus, Limits(catchups=1)) as feed:
        await asyncio.wait_for(feed.index_ready.wait(), 5)
        readers.gate.clear()  # a's round holds the partition's reader
        async with feed.subscribe("a", timeout=5) as first, feed.subscribe("b", timeout=5) as second:
            reading_a = asyncio.create_task(_history(first))
            await asyncio.sleep(0.05)
            waiting = asyncio.create_task(anext(second))  # b's measures its end, then waits for a round
            await asyncio.sleep(0.05)
            await _write(bus, "other", 2000)  # a crowd's ticks while b waits
            await _write(bus, "b", 2, start=3)  # and b's own, live
            readers.polled.clear()
            readers.gate.set()
            assert await reading_a == [b"a-0", b"a-1", b"a-2"]
            got = [await waiting]
            while len(got) < 6:
                got.append(await asyncio.wait_for(anext(second), 5))
    assert [r.value if r is not CAUGHT_UP else r for r in got] == [
        b"b-0",
        b"b-1",
        b"b-2",
        CAUGHT_UP,
        b"b-3",
        b"b-4",
    ]
    assert sum(readers.polled) < 50, readers.polled  # the histories, not the 2,000 written while b waited


async def test_pages_that_wait_together_share_one_read_of_the_partition():
    bus, readers = await _bus()
    trials = [f"t{i}" for i in range(20)]
    for trial in trials:
        await _index(bus, trial)
    for i in range(50):  # the trials' ticks interleaved, as trials running together log them
        for trial in trials:
            await _write(bus, trial, 1, start=i)
    await _index(bus, "first")  # a later trial: its page's round reads its one record
    await _write(bus, "first", 1)
    log_size = len(bus.logs[EVENTS][0])
    async with Feed(bus, Limits(catchups=1)) as feed, contextlib.AsyncExitStack() as stack:
        await asyncio.wait_for(feed.index_ready.wait(), 5)
        readers.gate.clear()
        first = await stack.enter_async_context(feed.subscribe("first", timeout=5))
        reading_first = asyncio.create_task(_history(first))  # its round waits at the gate
        await asyncio.sleep(0.05)
        pages = [await stack.enter_async_context(feed.subscribe(t, timeout=5)) for t in trials]
        reading = [asyncio.create_task(_history(p)) for p in pages]  # together, for the next round
        await asyncio.sleep(0.05)
        readers.polled.clear()
        readers.gate.set()
        assert await reading_first == [b"first-0"]
        histories = await asyncio.gather(*reading)
    for trial, history in zip(trials, histories):
        assert history == [f"{trial}-{i}".encode() for i in range(50)]
    # The first page's record, then one read of the log for the twenty pages (each read it before).
    assert sum(readers.polled) <= 1 + log_size, (sum(readers.polled), log_size)


async def test_a_page_that_does_not_read_its_history_is_dropped_and_holds_no_other_back():
    bus, readers = await _bus()
    for trial in ("stuck", "reader", "leaver"):
        await _index(bus, trial)
    for i in range(40):
        for trial in ("stuck", "reader", "leaver"):
            await _write(bus, trial, 1, start=i)
    async with Feed(bus, Limits(send_queue=4, send_timeout_s=0.2)) as feed, contextlib.AsyncExitStack() as stack:
        await asyncio.wait_for(feed.index_ready.wait(), 5)
        readers.gate.clear()
        stuck = await stack.enter_async_context(feed.subscribe("stuck", timeout=5))
        reader = await stack.enter_async_context(feed.subscribe("reader", timeout=5))
        async with feed.subscribe("leaver", timeout=5) as leaver:
            started = [asyncio.create_task(anext(s)) for s in (stuck, reader, leaver)]
            await asyncio.sleep(0.05)
            readers.gate.set()
            firsts = [(await t).value for t in started]
            assert firsts == [b"stuck-0", b"reader-0", b"leaver-0"]
        # The leaver has left; the stuck page reads nothing more; the reader gets all of its history.
        assert [b"reader-0", *await asyncio.wait_for(_history(reader), 5)] == [
            f"reader-{i}".encode() for i in range(40)
        ]
        with pytest.raises(Refused) as refused:
            while True:
                await asyncio.wait_for(anext(stuck), 5)
        assert refused.value.code == SLOW


async def test_a_page_whose_round_does_not_come_in_time_is_refused():
    bus, readers = await _bus()
    for trial in ("a", "b"):
        await _index(bus, trial)
        await _write(bus, trial, 3)
    async with Feed(bus, Limits(catchups=1, catchup_wait_s=0.2)) as feed:
        await asyncio.wait_for(feed.index_ready.wait(), 5)
        readers.gate.clear()  # a's round never reads
        async with feed.subscribe("a", timeout=5) as first, feed.subscribe("b", timeout=5) as second:
            holding = asyncio.create_task(anext(first))
            await asyncio.sleep(0.05)
            with pytest.raises(Refused) as refused:
                await asyncio.wait_for(anext(second), 5)
            assert refused.value.code == LIMITED
            readers.gate.set()
            assert (await holding).value == b"a-0"  # the round goes on without b
