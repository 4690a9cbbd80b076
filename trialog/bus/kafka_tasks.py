"""aiokafka's background tasks, watched.

aiokafka works in background tasks (per client: metadata; per consumer: fetches and
group coordination; per producer: sends). When one of them ends with an error — seen
in aiokafka 0.14 while a broker restarts: a ``KeyError`` in its client when a connection
closes under a request — whatever depends on it waits forever, without an error: the
consumer returns nothing, commits never finish, sends never complete. So a client's
metadata task is started again (:func:`_watch_metadata`), a consumer whose fetcher or
coordinator ended is replaced (:meth:`trialog.bus.kafka_consumer.KafkaConsumer.poll`),
and so is a producer whose sender ended (:meth:`trialog.bus.kafka.KafkaBus.send_many`).
"""

from __future__ import annotations

import asyncio

from trialog.telemetry.logs import get_logger

log = get_logger(__name__)

WATCH_EVERY_S = 1.0  # how often a client's metadata task is checked (see _watch_metadata)


async def _watch_metadata(client) -> None:
    """aiokafka refreshes a client's metadata in one background task, and whatever needs
    fresh metadata waits for it: a group coordinator lookup (so every commit after the
    broker restarts), a send to a partition whose leader moved. When that task ends with an
    error, they wait forever. So it is started again; it picks up the refresh that was asked
    for and those waiting get their answer."""
    while True:
        await asyncio.sleep(WATCH_EVERY_S)
        task = client._sync_task  # noqa: SLF001
        if task is not None and task.done() and not task.cancelled():  # cancelled: the client is closing
            log.warning("restarting the Kafka client's metadata task", why=_ended_with(task))
            client._sync_task = asyncio.create_task(client._md_synchronizer())  # noqa: SLF001


def _stopped(task: asyncio.Future | None) -> bool:
    """Whether a client's background task has ended (it only ends when the client stops)."""
    return task is not None and task.done()


def _ended_with(task: asyncio.Future) -> str:
    if task.cancelled():
        return "cancelled"
    exc = task.exception()
    cause = exc.__cause__ if exc is not None and exc.__cause__ is not None else exc
    return f"{type(cause).__name__}: {cause}" if cause is not None else "ended"
