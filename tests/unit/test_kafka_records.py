"""Records made where aiokafka unpacks a fetch (trialog/bus/kafka_records.py): the same fields
the consumer's copy of aiokafka's ConsumerRecord had, and aiokafka's own records for any other
consumer."""

from __future__ import annotations

from aiokafka.consumer import fetcher
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import ConsumerRecord, TopicPartition

from trialog.bus import kafka_records
from trialog.bus.base import Record
from trialog.bus.kafka_records import MADE_IN_PLACE, RecordMaker, as_records

TP = TopicPartition("p.events", 3)
HEADERS = [("kind", b"observation"), ("tick", b"7"), ("mac.environment", b"x" * 32), ("empty", b"")]


def _batch() -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
        batch_size=1 << 20,
    )  # fmt: skip
    builder.append(0, timestamp=1_700_000_000_123, key=b"trial-1", value=b"v" * 60, headers=HEADERS)
    builder.append(1, timestamp=1_700_000_000_124, key=None, value=None, headers=[])
    builder.append(2, timestamp=1_700_000_000_125, key=b"trial-2", value=b"", headers=HEADERS[:1])
    return bytes(builder.build())


def _read(key_deserializer) -> list:
    reader = fetcher.PartitionRecords(TP, MemoryRecords(_batch()), [], 0, key_deserializer, None, True, 0)
    return list(reader)


def test_a_consumer_of_ours_gets_records_with_the_fields_of_aiokafkas():
    assert MADE_IN_PLACE  # the aiokafka this is tested with unpacks as kafka_records knows
    ours = _read(RecordMaker({"p.events": "events"}))
    theirs = _read(None)
    assert all(type(r) is Record for r in ours) and all(type(m) is ConsumerRecord for m in theirs)
    assert [(r.role, r.partition, r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in ours] == [
        ("events", m.partition, m.offset, m.key, m.value, tuple(m.headers or ()), m.timestamp) for m in theirs
    ]
    assert ours[0].headers == tuple(HEADERS) and ours[1].key is None and ours[1].value is None
    assert ours[0].timestamp_ms == 1_700_000_000_123
    # Made the same way when aiokafka names its arguments.
    named = fetcher.PartitionRecords(
        TP, MemoryRecords(_batch()), [], 0, key_deserializer=RecordMaker({"p.events": "events"}),
        value_deserializer=None, check_crcs=True, isolation_level=0,
    )  # fmt: skip
    assert [(r.offset, r.key, r.headers) for r in named] == [(r.offset, r.key, r.headers) for r in ours]


def test_where_aiokafka_is_not_as_known_its_records_are_copied_into_the_same_records(monkeypatch):
    roles = {"p.events": "events"}
    made = as_records(roles, TP, _read(RecordMaker(roles)))
    assert made and all(type(r) is Record for r in made)
    monkeypatch.setattr(kafka_records, "MADE_IN_PLACE", False)
    copied = as_records(roles, TP, _read(None))
    assert [vars_of(r) for r in copied] == [vars_of(r) for r in made]


def vars_of(r: Record) -> tuple:
    return (r.role, r.partition, r.offset, r.key, r.value, r.headers, r.timestamp_ms, r.problem, r.span)


def test_any_other_consumer_reads_with_aiokafkas_own_class():
    def upper(key):
        return key.upper() if key else key

    (first, *_) = _read(upper)
    assert type(first) is ConsumerRecord and first.key == b"TRIAL-1"
