"""Running service loops as a long-lived process: signals, health, clean shutdown.

Readiness (``/readyz``) means: connected to Kafka, the consumer owns its
partitions, and catch-up from the log is finished for all of them. Liveness
(``/livez``) means the loop keeps turning.

SIGUSR1 logs what every task of the process is waiting on (``kill -USR1 PID``):
for a service that is alive but does nothing.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import time
from collections.abc import Sequence
from typing import Any

from trialog.bus.base import Bus
from trialog.runtime.service import ServiceLoop, run_until_stopped
from trialog.runtime.threads import one_blas_thread
from trialog.telemetry.health import Health, serve_health
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)


def run_async(coro) -> Any:
    """Run a process's coroutine, on uvloop when it is installed (see docs/performance.md):
    services, and commands that read the log as they go (``trialog train``'s and ``trialog
    run``'s controllers read every record of the trials they run)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


LOOP_STALL_S = 10.0  # a loop that has not finished a turn for this long stops proving liveness


async def serve(
    bus: Bus, loops: Sequence[ServiceLoop], *, name: str, health_port: int = 0, stop: asyncio.Event | None = None
) -> None:
    """Run ``loops`` until SIGTERM/SIGINT (or ``stop``); serve health on ``health_port`` (0: off)."""
    stop = stop or asyncio.Event()
    one_blas_thread()  # for the life of the process (trialog/runtime/threads.py says why)
    running = asyncio.get_running_loop()
    for sig, handler in ((signal.SIGTERM, stop.set), (signal.SIGINT, stop.set), (signal.SIGUSR1, log_tasks)):
        try:
            running.add_signal_handler(sig, handler)
        except (NotImplementedError, RuntimeError):  # not the main thread (tests)
            pass
    health = Health()
    server = await serve_health(health, bus.settings.health_host, health_port) if health_port else None
    watcher = asyncio.create_task(_watch_health(health, loops))
    log.info(
        "service starting", service=name, bootstrap=bus.settings.bootstrap_servers, health_port=health_port or None
    )
    # What start-up made (modules, specs, schemas) lives as long as the process: moved out of
    # the collector's generations, it is not traversed again by every collection that follows.
    gc.freeze()
    try:
        async with bus:
            await run_until_stopped(loops, stop)
    finally:
        watcher.cancel()
        if server is not None:
            server.close()
        log.info("service stopped", service=name)


def log_tasks() -> None:
    """Log every task of the running event loop with the chain of calls it is suspended in,
    innermost last (``Task.get_stack`` gives only the outermost frame of a coroutine).
    Tasks that run Trialog's code come last, nearest the end of a log's tail."""
    listed = []
    for task in asyncio.all_tasks():
        chain, coro, ours = [], task.get_coro(), False
        while (
            coro is not None
            and (frame := getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)) is not None
        ):
            ours = ours or "/trialog/" in frame.f_code.co_filename
            chain.append(f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} {frame.f_code.co_name}")
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        listed.append((ours, task.get_name(), " > ".join(chain) or repr(task)))
    for _, name, awaits in sorted(listed, key=lambda t: t[0]):
        log.warning("task waiting", task=name, awaits=awaits)
    log.warning("tasks listed", count=len(listed))


async def _watch_health(health: Health, loops: Sequence[ServiceLoop]) -> None:
    while True:
        # Live only while every service loop keeps finishing turns (a turn waits at most
        # its poll timeout): a loop stuck on a hung call stops the beats, not just a dead event loop.
        if all(time.monotonic() - loop.turned_at < LOOP_STALL_S for loop in loops):
            health.beat()
        waiting = [loop.handler.service_name for loop in loops if not loop.ready.is_set()]
        away = [loop.handler.service_name for loop in loops if loop.log.away]
        if waiting:
            health.set_ready(False, f"catching up or waiting for partitions: {', '.join(waiting)}")
        else:  # a loop the log is away from acts on nothing until it is back (trialog.runtime.log_watch)
            health.set_ready(not away, f"the log is away: {', '.join(away)} waiting for it" if away else "")
        await asyncio.sleep(1.0)
