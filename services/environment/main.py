"""The environment service: hosts environment implementations of a spec.

Each implementation is its own consumer group (``env.<implementation>``): run
more processes to share the trials of one implementation; run different
processes for different implementations.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from trialog.bus.base import Bus
from trialog.errors import SpecError
from trialog.runtime.environment_runtime import EnvironmentHandler
from trialog.runtime.process import serve
from trialog.runtime.service import ServiceLoop
from trialog.spec import Spec
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)


def loops_for(bus: Bus, spec: Spec, implementations: Sequence[str] = ()) -> list[ServiceLoop]:
    names = list(implementations) or [n for n, impl in spec.environments.items() if impl.served_here]
    unknown = [n for n in names if n not in spec.environments]
    if unknown:
        raise SpecError(
            f"unknown environment implementation(s) {', '.join(unknown)}; declared: {', '.join(spec.environments)}",
            file=spec.file,
        )
    external = [n for n in names if spec.environments[n].external]
    if external:
        raise SpecError(
            f"environment implementation(s) {', '.join(external)} are external: their own process serves them",
            file=spec.file,
        )
    return [
        ServiceLoop(
            bus, EnvironmentHandler({n: spec.environments[n].entry}, {n: spec.operator_config(n)}), group=f"env.{n}"
        )
        for n in names
    ]


def prepare(loops: Sequence[ServiceLoop], spec: Spec) -> None:
    """Each served implementation's ``prepare`` (Environment.prepare), before any loop joins its group."""
    for loop in loops:
        handler = loop.handler
        assert isinstance(handler, EnvironmentHandler)
        for name, factory in handler.factories.items():
            if callable(ready := getattr(factory, "prepare", None)):
                began = time.monotonic()
                ready(spec.operator_config(name))
                log.info("environment prepared", implementation=name, seconds=round(time.monotonic() - began, 1))


async def main(bus: Bus, spec: Spec, implementations: Sequence[str] = (), health_port: int = 0) -> None:
    loops = loops_for(bus, spec, implementations)
    await asyncio.to_thread(prepare, loops, spec)
    await serve(bus, loops, name="environment", health_port=health_port)
