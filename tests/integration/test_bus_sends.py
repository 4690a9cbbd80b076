"""What ``KafkaBus.send_many`` says it delivered is what the log holds, in order.

Each record's answer must name the partition, offset and timestamp the log has for it
(a service reading its own records back in place takes them from the answer), and a
partition's records must be logged in the order they were given — also when they fill
more than one batch, and when several tasks write to the same partitions at once.
``send_many`` builds a partition's batches itself and hands each to the producer whole;
aiokafka answers a batch with its first record's offset (the others follow it) and with
the timestamp of its first record.
"""

from __future__ import annotations

import asyncio

import pytest

from trialog.bus.kafka import BATCH_BYTES, KafkaBus
from trialog.datalog.replay import partition_records
from trialog.protocol.topics import EVENTS

pytestmark = pytest.mark.integration


def _items(prefix: str, trials: int, per_trial: int, size: int) -> list[tuple]:
    """Records of several trials, interleaved as a service writes them (tick by tick)."""
    return [
        (EVENTS, f"{prefix}-{t}".encode(), f"{prefix}-{t}-{n}:".encode().ljust(size, b"."), [("kind", b"x")])
        for n in range(per_trial)
        for t in range(trials)
    ]


async def _logged(bus: KafkaBus) -> dict[tuple[int, int], tuple[bytes, bytes, int]]:
    """(partition, offset) -> (key, value, timestamp) of every record of the events topic."""
    return {
        (r.partition, r.offset): (r.key, r.value, r.timestamp_ms)
        for p in range(bus.settings.partitions)
        async for r in partition_records(bus, p, 0)
    }


async def test_each_record_is_where_its_answer_says_in_the_order_given(kafka_settings):
    bus = KafkaBus(kafka_settings)
    await bus.create_topics()
    async with bus:
        small = _items("small", trials=12, per_trial=5, size=60)
        # 200 KB records: a batch holds BATCH_BYTES (512 KB), so a partition's records fill several.
        large = _items("large", trials=3, per_trial=6, size=200_000)
        assert 6 * 200_000 > 2 * BATCH_BYTES, "each trial's records must fill more than two batches"
        answers = [await bus.send_many(small), await bus.send_many(large)]
        # Two tasks at once on the same partitions: each one's batches wait for the other's.
        together = [_items("a", 8, 4, 60), _items("b", 8, 4, 60)]
        answers += await asyncio.gather(*(bus.send_many(items) for items in together))
        logged = await _logged(bus)

    given = [small, large, *together]
    assert sum(map(len, given)) == len(logged), "a record was logged twice or not at all"
    for items, delivered in zip(given, answers):
        assert len(delivered) == len(items)
        last: dict[bytes, tuple[int, int]] = {}
        for (role, key, value, _headers), d in zip(items, delivered):
            assert (d.role, d.partition) == (role, bus.partition_of(key.decode()))
            assert logged[(d.partition, d.offset)] == (key, value, d.timestamp_ms)
            assert (d.partition, d.offset) > last.get(key, (d.partition, -1)), f"{key!r} logged out of order"
            last[key] = (d.partition, d.offset)
