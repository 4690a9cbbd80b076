"""Logging, configured once: console for people, JSON lines for machines.

Every module does ``log = get_logger(__name__)``; services and the CLI call
:func:`configure` once at start. ``TRIALOG_LOG_FORMAT=json`` (or ``console``)
and ``TRIALOG_LOG_LEVEL`` choose without code changes.
"""

from __future__ import annotations

import logging
import os
import sys

import orjson
import structlog

_configured = False
_handler: logging.Handler | None = None  # ours on the root logger, replaced on reconfiguration


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
