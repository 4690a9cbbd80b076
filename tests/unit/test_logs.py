"""The logs a service writes while a library repeats itself (a broker away): each kind of
message once per window, the next one saying how many were held back."""

from __future__ import annotations

import logging
import time

from trialog.telemetry.logs import _Repeats, connectivity_lines_held


def said(records: list[logging.LogRecord], repeats: _Repeats) -> list[str]:
    return [r.getMessage() for r in records if repeats.filter(r)]


def record(name: str, msg: str, *args, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_a_library_repeating_itself_is_written_once_per_kind_and_window():
    repeats = _Repeats(every_s=0.2)
    flood = [record("aiokafka", "OffsetCommit failed for group %s: %s", n % 3, "rebalancing") for n in range(2000)]
    flood += [record("aiokafka", "Topic %s not found in cluster metadata", 2) for _ in range(500)]
    flood += [record("aiokafka.consumer.fetcher", "Fetch offset %s is out of range", 2) for _ in range(500)]
    first = said(flood, repeats)
    assert first == ["OffsetCommit failed for group 0: rebalancing", "Fetch offset 2 is out of range"]
    time.sleep(0.25)
    later = said([record("aiokafka", "Topic %s not found in cluster metadata", 1)], repeats)
    assert len(later) == 1 and later[0].startswith("Topic 1 not found in cluster metadata (2499 more like it since")


def test_trialog_lines_and_a_library_info_lines_are_never_held_back():
    repeats = _Repeats(every_s=60)
    ours = [record("trialog.runtime.service", "publish failed; retrying") for _ in range(5)]
    info = [record("aiokafka.consumer", "joined group", level=logging.INFO) for _ in range(5)]
    assert len(said(ours + info, repeats)) == 10


def test_the_kafka_clients_connectivity_lines_are_counted_not_written():
    """The log watch says a lost broker in Trialog's words; the client's per-attempt lines
    about it are counted (the back line reports them), its other warnings still written."""
    repeats = _Repeats(every_s=60)
    before = connectivity_lines_held()
    lost = [
        record("aiokafka", "Unable connect to node with id %s: %s", 2, "refused"),
        record("aiokafka.consumer.fetcher", "Failed fetch messages from 2: NodeNotReadyError: not ready"),
        record("aiokafka.consumer.group_coordinator", "Marking the coordinator dead (node 2)for group g."),
        record("aiokafka.producer.sender", "Got error produce response: KafkaConnectionError: closed"),
        record("aiokafka.consumer.group_coordinator", "Heartbeat failed for group g: coordinator (node 3) is …"),
        record("aiokafka.producer.sender", "Got error produce response: NotEnoughReplicasError"),
        record("aiokafka", "Unable to update metadata from [2, 1]"),
    ]
    other = record("aiokafka.producer", "Topic authorization failed for topic t", level=logging.WARNING)
    assert said([*lost, other], repeats) == ["Topic authorization failed for topic t"]
    assert connectivity_lines_held() - before == len(lost)
