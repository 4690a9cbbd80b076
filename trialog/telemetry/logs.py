"""Logging, configured once: console for people, JSON lines for machines.

Every module does ``log = get_logger(__name__)``; services and the CLI call
:func:`configure` once at start. ``TRIALOG_LOG_FORMAT=json`` (or ``console``)
and ``TRIALOG_LOG_LEVEL`` choose without code changes.
"""

from __future__ import annotations

import logging
import os
import sys
import time

import orjson
import structlog

_configured = False
_handler: logging.Handler | None = None  # ours on the root logger, replaced on reconfiguration
REPEATS_EVERY_S = 60.0  # a library's message said again within this long is counted, not written
# What the Kafka client says while a broker is lost or moving: per attempt, and said in
# Trialog's own words by the services' log watch ("the log is away", "back": log_watch.py),
# which counts these (connectivity_lines_held) instead of writing them.
_CONNECTIVITY = (
    "Unable connect to node", "Unable to request metadata", "Unable to update metadata", "coordinator dead",
    "Heartbeat session expired", "Heartbeat failed", "KafkaConnectionError", "NodeNotReadyError",
    "NotLeaderForPartitionError", "NotLeaderOrFollower", "LeaderNotAvailableError", "NotCoordinator",
    "CoordinatorNotAvailable", "CoordinatorLoadInProgress", "NotEnoughReplicas", "RequestTimedOutError",
)  # fmt: skip
_held = [0]  # connectivity lines of the Kafka client held back in this process


def connectivity_lines_held() -> int:
    """How many of the Kafka client's connectivity lines this process held back so far."""
    return _held[0]


class _Repeats(logging.Filter):
    """A library's warnings and errors, each kind once a minute, and none of the Kafka client's
    about connectivity (counted: the log watch says it in Trialog's words). While a broker is away,
    aiokafka says the same few things over and over: measured, 1,650–2,900 lines per service
    in a 20 s outage of two brokers of three, which buried everything else. After one
    warning or error of a library's logger, the next ones of the same logger and level within
    :data:`REPEATS_EVERY_S` are counted instead; the next one let through says how many were
    held back and since when. (aiokafka has a handful of loggers: a handful of lines a minute.)"""

    def __init__(self, every_s: float = REPEATS_EVERY_S) -> None:
        super().__init__()
        self.every_s = every_s
        self._said: dict[tuple[str, int], list] = {}  # (logger, level) -> [last let through, held back, first held at]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("trialog") or record.levelno < logging.WARNING:
            return True
        if record.name.startswith("aiokafka") and any(c in record.getMessage() for c in _CONNECTIVITY):
            _held[0] += 1
            return False
        kind = (record.name, record.levelno)
        now = time.monotonic()
        said = self._said.get(kind)
        if said is not None and now - said[0] < self.every_s:
            if not said[1]:
                said[2] = time.time()
            said[1] += 1
            return False
        if said is not None and said[1]:
            since = time.strftime("%H:%M:%S", time.gmtime(said[2]))
            record.msg = f"{record.getMessage()} ({said[1]} more like it since {since} UTC, not written)"
            record.args = ()
        self._said[kind] = [now, 0, 0.0]
        return True


def configure(fmt: str | None = None, level: str | None = None) -> None:
    """Set up structlog and the standard library's logging (used by aiokafka)."""
    global _configured
    fmt = (fmt or os.environ.get("TRIALOG_LOG_FORMAT") or ("console" if sys.stderr.isatty() else "json")).lower()
    level_name = (level or os.environ.get("TRIALOG_LOG_LEVEL") or "INFO").upper()
    numeric = logging.getLevelName(level_name)
    if not isinstance(numeric, int):
        numeric = logging.INFO
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(
            serializer=lambda obj, **_: orjson.dumps(obj, default=str).decode()
        )
        shared.append(structlog.processors.format_exc_info)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # Resolve sys.stderr at each logger creation (not once): test runners swap it.
        logger_factory=lambda *args: structlog.PrintLogger(sys.stderr),
        cache_logger_on_first_use=False,
    )
    # The standard library's records (aiokafka's) go through the same renderer, so that
    # JSON output stays one JSON object per line.
    global _handler
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    _handler = logging.StreamHandler(sys.stderr)
    _handler.addFilter(_Repeats())
    _handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        )
    )
    root.addHandler(_handler)
    root.setLevel(max(numeric, logging.WARNING))
    # aiokafka is chatty about routine coordinator moves; its warnings stay, its info goes.
    logging.getLogger("aiokafka").setLevel(max(numeric, logging.WARNING))
    _configured = True


def get_logger(name: str | None = None) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
