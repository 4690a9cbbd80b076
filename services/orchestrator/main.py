"""Entry point of the orchestrator service."""

from __future__ import annotations

from collections.abc import Sequence

from trialog.bus.base import Bus
from trialog.runtime.process import serve
from trialog.runtime.service import ServiceLoop
from trialog.services.orchestrator.handler import OrchestratorHandler
from trialog.spec import Spec


def loop_for(bus: Bus, specs: Sequence[Spec]) -> ServiceLoop:
    return ServiceLoop(bus, OrchestratorHandler({s.name: s for s in specs}), group="orchestrator")


async def main(bus: Bus, specs: Sequence[Spec], health_port: int = 0) -> None:
    await serve(bus, [loop_for(bus, specs)], name="orchestrator", health_port=health_port)
