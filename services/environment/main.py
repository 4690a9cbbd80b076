"""The environment service: hosts environment implementations of a spec.

Each implementation is its own consumer group (``env.<implementation>``): run
more processes to share the trials of one implementation; run different
processes for different implementations.
"""

from __future__ import annotations

from collections.abc import Sequence

from trialog.bus.base import Bus
from trialog.errors import SpecError
from trialog.runtime.environment_runtime import EnvironmentHandler
from trialog.runtime.process import serve
from trialog.runtime.service import ServiceLoop
from trialog.spec import Spec


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


async def main(bus: Bus, spec: Spec, implementations: Sequence[str] = (), health_port: int = 0) -> None:
    await serve(bus, loops_for(bus, spec, implementations), name="environment", health_port=health_port)
