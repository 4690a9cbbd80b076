"""Bus.read_latest: the latest value per key of a compacted topic, decoded newest first."""

from __future__ import annotations

import orjson

from trialog.bus.base import _UNDECODED_PER_KEY
from trialog.bus.memory import MemoryBus
from trialog.protocol.topics import TRIALS

ROLE = TRIALS  # compacted, as every topic read this way


async def _read(memory_settings, values: list[tuple[bytes, bytes | None]]) -> tuple[dict, list[bytes]]:
    bus = MemoryBus(memory_settings)
    await bus.send_many([(ROLE, key, value, []) for key, value in values])
    decoded: list[bytes] = []

    def decode(value: bytes):
        decoded.append(value)
        return orjson.loads(value)

    return await bus.read_latest(ROLE, decode), decoded


async def test_the_newest_value_of_each_key_and_only_it_is_decoded(memory_settings):
    latest, decoded = await _read(memory_settings, [(b"a", b"1"), (b"b", b"2"), (b"a", b"3")])
    assert latest == {"a": 3, "b": 2}
    assert sorted(decoded) == [b"2", b"3"]


async def test_a_value_that_does_not_decode_leaves_the_one_before_it(memory_settings):
    latest, _ = await _read(memory_settings, [(b"a", b"1"), (b"a", b"{broken"), (b"b", b"{broken")])
    assert latest == {"a": 1}


async def test_a_tombstone_deletes_its_key_and_a_later_value_brings_it_back(memory_settings):
    latest, _ = await _read(memory_settings, [(b"a", b"1"), (b"a", None), (b"b", b"2"), (b"b", None), (b"b", b"4")])
    assert latest == {"b": 4}


async def test_a_key_updated_often_keeps_its_newest_good_value_and_decodes_few(memory_settings):
    """Many updates of one key, the last ones broken: the newest good value counts, and the
    reader decodes about one value in ``_UNDECODED_PER_KEY`` of them, not every one."""
    updates = [(b"a", str(n).encode()) for n in range(100)] + [(b"a", b"{broken")] * 3
    latest, decoded = await _read(memory_settings, updates)
    assert latest == {"a": 99}
    assert len(decoded) <= 2 * (len(updates) // _UNDECODED_PER_KEY + 1)
