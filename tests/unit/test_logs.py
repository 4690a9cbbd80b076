"""The logs a service writes while a library repeats itself (a broker away): each kind of
message once per window, the next one saying how many were held back."""

from __future__ import annotations

import logging
import time

from trialog.telemetry.logs import _Repeats


def said(records: list[logging.LogRecord], repeats: _Repeats) -> list[str]:
    return [r.getMessage() for r in records if repeats.filter(r)]


def record(name: str, msg: str, *args, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_a_library_repeating_itself_is_written_once_per_kind_and_window():
    repeats = _Repeats(every_s=0.2)
    flood = [record("aiokafka", "Unable connect to node with id %s: %s", n % 3, "refused") for n in range(2000)]
    flood += [record("aiokafka", "Unable to request metadata from node %s", 2) for _ in range(500)]
    flood += [record("aiokafka.consumer.fetcher", "Failed fetch messages from %s", 2) for _ in range(500)]
    first = said(flood, repeats)
    assert first == ["Unable connect to node with id 0: refused", "Failed fetch messages from 2"]
    time.sleep(0.25)
    later = said([record("aiokafka", "Unable to request metadata from node %s", 1)], repeats)
    assert len(later) == 1 and later[0].startswith("Unable to request metadata from node 1 (2499 more like it since")


def test_trialog_lines_and_a_library_info_lines_are_never_held_back():
    repeats = _Repeats(every_s=60)
    ours = [record("trialog.runtime.service", "publish failed; retrying") for _ in range(5)]
    info = [record("aiokafka.consumer", "joined group", level=logging.INFO) for _ in range(5)]
    assert len(said(ours + info, repeats)) == 10
