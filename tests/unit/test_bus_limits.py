"""Record size limits at the Kafka edge, on the in-memory bus (the real broker's side is
in tests/integration/test_transport_faults.py)."""

from __future__ import annotations

import pytest

from trialog.bus.base import Record
from trialog.bus.memory import MemoryBus
from trialog.errors import RecordsTooLarge
from trialog.protocol.events import DeadLetter, Reward
from trialog.protocol.topics import DEAD_LETTERS, EVENTS, RECORD_LIMIT


async def test_an_oversized_record_is_refused_and_the_others_of_its_send_delivered(memory_settings):
    bus = MemoryBus(memory_settings)
    small = Reward("t", tick=1, receiver="alice", value=1.0, confidence=1.0, sender="judge")
    big = Reward(
        "t",
        tick=2,
        receiver="alice",
        value=1.0,
        confidence=1.0,
        sender="judge",
        user_data='"' + "x" * RECORD_LIMIT + '"',
    )
    with pytest.raises(
        RecordsTooLarge, match=r"reward of [\d,]+ bytes for trial t exceeds the 1,048,576-byte limit"
    ) as refused:
        await bus.publish_all(EVENTS, [small, big, small])
    assert list(refused.value.refused) == [1] and sorted(refused.value.delivered) == [0, 2]
    assert refused.value.trial_id == "t"
    assert [bus.codec.decode(r.value, "reward").tick for r in bus.records(EVENTS)] == [1, 1]


async def test_a_dead_letter_too_large_to_send_keeps_its_reason_and_drops_the_value(memory_settings):
    bus = MemoryBus(memory_settings)
    record = Record(EVENTS, 0, 42, b"t", bytes(5 * 1024 * 1024), (("kind", b"reward"),), 0)
    await bus.dead_letter(record, "undecodable record: zeros", "orchestrator")
    (letter,) = [DeadLetter(**bus.store.decode(r.value, DeadLetter.SCHEMA)) for r in bus.records(DEAD_LETTERS)]
    assert letter.value is None and letter.offset == 42 and letter.headers == {"kind": b"reward"}
    assert letter.reason.startswith("undecodable record: zeros") and "5,242,880 bytes is not kept" in letter.reason
