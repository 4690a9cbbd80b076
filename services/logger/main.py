"""Entry point of the logger service."""

from __future__ import annotations

from pathlib import Path

from trialog.bus.base import Bus
from trialog.datalog.archive import Archive
from trialog.runtime.process import serve
from trialog.runtime.service import ServiceLoop
from trialog.services.logger.handler import LoggerHandler

GROUP = "logger"


def loop_for(bus: Bus, archive_dir: str | Path, *, grace_s: float = 5.0, idle_s: float = 3600.0) -> ServiceLoop:
    handler = LoggerHandler(Archive(archive_dir, bus.store), grace_s=grace_s, idle_s=idle_s)
    return ServiceLoop(bus, handler, group=GROUP)


async def main(
    bus: Bus, archive_dir: str | Path, *, grace_s: float = 5.0, idle_s: float = 3600.0, health_port: int = 0
) -> None:
    await serve(
        bus, [loop_for(bus, archive_dir, grace_s=grace_s, idle_s=idle_s)], name="logger", health_port=health_port
    )
