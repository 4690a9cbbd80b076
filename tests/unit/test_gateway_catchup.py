"""A page's catch-up reads the trial's history up to where the partition ended when the page
subscribed, however long it waited for its turn: what came after reaches it through the tail.
Every record of the trial reaches it once, in order."""

from __future__ import annotations

import asyncio

from trialog.bus.memory import MemoryBus
from trialog.protocol.events import TrialRecord
from trialog.protocol.topics import EVENTS, TRIALS
from trialog.services.gateway.door import Limits
from trialog.services.gateway.feed import CAUGHT_UP, Feed
from trialog.settings import Settings


async def _write(bus: MemoryBus, trial_id: str, n: int, start: int = 0) -> None:
    await bus.send_many([(EVENTS, trial_id.encode(), f"{trial_id}-{i}".encode(), []) for i in range(start, start + n)])


async def _index(bus: MemoryBus, trial_id: str) -> None:
    p = bus.partition_of(trial_id)
    start = len(bus.logs[EVENTS][p])
    record = TrialRecord(trial_id, status="running", partition=p, start_offset=start)
    await bus.send_many([(TRIALS, trial_id.encode(), bus.codec.encode(record), [])])


async def test_a_catch_up_that_waited_reads_only_to_the_end_at_subscription():
    bus = MemoryBus(Settings.load({"partitions": 1}, environ={}))
    await bus.create_topics()
    polled: list[int] = []  # records each catch-up poll returned
    consumer = bus.consumer

    def counting_consumer(roles, **kwargs):
        c = consumer(roles, **kwargs)
        if kwargs.get("partitions") is not None:  # a catch-up reader (the tail reads every partition)
            poll = c.poll

            async def counted(*args, **kw):
                got = await poll(*args, **kw)
                polled.append(len(got))
                return got

            c.poll = counted
        return c

    bus.consumer = counting_consumer
    for trial in ("a", "b"):
        await _index(bus, trial)
        await _write(bus, trial, 3)
    async with Feed(bus, Limits(catchups=1)) as feed:
        await asyncio.wait_for(feed.index_ready.wait(), 5)
        async with feed.subscribe("a", timeout=5) as first:
            assert await anext(first) is not None  # a's catch-up holds the only turn
            async with feed.subscribe("b", timeout=5) as second:
                waiting = asyncio.create_task(anext(second))  # b's measures its end, then waits
                await asyncio.sleep(0.05)
                assert not waiting.done()
                await _write(bus, "other", 2000)  # a crowd's ticks while b waits
                await _write(bus, "b", 2, start=3)  # and b's own, live
                polled.clear()
                rest_of_a = [await anext(first) for _ in range(3)]  # a's catch-up ends: b's turn
                assert rest_of_a[-1] is CAUGHT_UP
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
    assert sum(polled) < 50, polled  # the history up to b's subscription, not the 2,000 written while it waited
