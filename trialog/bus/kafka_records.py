"""Trialog's :class:`Record` made where aiokafka unpacks a fetched batch, instead of after it.

aiokafka hands out each record of a fetch as a ``ConsumerRecord`` of eleven fields (its sizes,
checksum and timestamp type among them), which :class:`~trialog.bus.kafka_consumer.KafkaConsumer`
then copied into a :class:`Record`: two objects a record, on every read of every service, where
the reader keeps one. A consumer of ours gives aiokafka a :class:`RecordMaker` as its key
deserializer. aiokafka passes it to the reader of each partition of a fetch, and for such a
consumer that reader makes the Record itself (:class:`_Unpacked`), with the fields the copy had.
Any other consumer in the process (a benchmark's raw floor, a tool's) reads with aiokafka's own
class and gets its ``ConsumerRecord`` as before.

A replay of the benchmark's log read about 5 % more records a second this way, its CPU a record
9.30–10.32 → 8.76–9.75 µs (docs/performance.md).
"""

from __future__ import annotations

from aiokafka.consumer import fetcher

from trialog.bus.base import Record


class RecordMaker:
    """A consumer's key deserializer: the key as it is (aiokafka calls it with each record's
    key), and the mark that has the consumer's batches make :class:`Record`\\ s. ``roles``:
    topic -> role, each Record's ``role``."""

    __slots__ = ("roles",)

    def __init__(self, roles: dict[str, str]):
        self.roles = roles

    def __call__(self, key: bytes | None) -> bytes | None:
        return key


_AIOKAFKAS = fetcher.PartitionRecords
# Installed where aiokafka's fetcher makes them, if it makes them as this module knows (a class
# making a ConsumerRecord a record, by ``_consumer_record``); otherwise the consumer copies as before.
MADE_IN_PLACE = isinstance(_AIOKAFKAS, type) and callable(getattr(_AIOKAFKAS, "_consumer_record", None))

if MADE_IN_PLACE:

    class _Unpacked(_AIOKAFKAS):
        """aiokafka's records of one partition of a fetch, as Records for a consumer of ours."""

        def _consumer_record(self, tp, record):
            return Record(
                self._key_deserializer.roles[tp.topic], tp.partition, record.offset, record.key, record.value,
                tuple(record.headers), record.timestamp,
            )  # fmt: skip

    def _partition_records(*args, **kwargs):
        """What aiokafka's fetcher makes for each partition of a fetch: ours for a consumer of ours,
        aiokafka's own, untouched, for any other. Its arguments as aiokafka's class takes them (the
        key deserializer fifth)."""
        marked = kwargs.get("key_deserializer", args[4] if len(args) > 4 else None)
        return (_Unpacked if type(marked) is RecordMaker else _AIOKAFKAS)(*args, **kwargs)

    fetcher.PartitionRecords = _partition_records


def as_records(roles: dict[str, str], tp, messages: list) -> list[Record]:
    """The records one partition of a ``getmany`` handed out, as Records: as they are where they
    were made in place, else copied out of aiokafka's ConsumerRecords (the same fields)."""
    if MADE_IN_PLACE:
        return messages
    role = roles[tp.topic]
    return [Record(role, tp.partition, m.offset, m.key, m.value, tuple(m.headers or ()), m.timestamp) for m in messages]
