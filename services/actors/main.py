"""The actor service: plays actor implementations of a spec.

Each implementation is its own consumer group (``actors.<implementation>``), so
each scales on its own; one process may serve several. Client implementations
(humans, outside scripts) are not served here: they join through
:mod:`trialog.client_actor`; nor are external ones (``external: true``), which a
process of their own serves, in any language (docs/protocol.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from trialog.bus.base import Bus
from trialog.errors import SpecError
from trialog.runtime.actor_runtime import ActorHandler
from trialog.runtime.process import serve
from trialog.runtime.service import ServiceLoop
from trialog.spec import Spec


def loops_for(bus: Bus, spec: Spec, implementations: Sequence[str] = ()) -> list[ServiceLoop]:
    names = list(implementations) or [n for n, impl in spec.actors.items() if impl.served_here]
    for n in names:
        if n not in spec.actors:
            raise SpecError(f"unknown actor implementation {n!r}; declared: {', '.join(spec.actors)}", file=spec.file)
        if spec.actors[n].client:
            raise SpecError(
                f"actor implementation {n!r} is a client actor: it joins from outside, no service plays it",
                file=spec.file,
            )
        if spec.actors[n].external:
            raise SpecError(
                f"actor implementation {n!r} is external: its own process serves it (see docs/protocol.md)",
                file=spec.file,
            )
    return [
        ServiceLoop(bus, ActorHandler(n, spec.actors[n].entry, spec.actors[n].config), group=f"actors.{n}")
        for n in names
    ]


async def main(bus: Bus, spec: Spec, implementations: Sequence[str] = (), health_port: int = 0) -> None:
    await serve(bus, loops_for(bus, spec, implementations), name="actors", health_port=health_port)
