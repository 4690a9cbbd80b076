"""Entry point of the learner service: ``trialog serve learner --implementation NAME``."""

from __future__ import annotations

import inspect

from trialog.actor import Policy
from trialog.bus.base import Bus
from trialog.errors import SpecError
from trialog.learn.spaces import classes_played, implementation_sized
from trialog.runtime.process import serve
from trialog.runtime.service import ServiceLoop
from trialog.services.learner.handler import LearnerHandler
from trialog.spec import Spec, load_entry


def loop_for(
    bus: Bus,
    spec: Spec,
    implementation: str,
    *,
    experiment: str = "",
    tensorboard: str = "",
    learn_from: tuple[str, ...] = (),
) -> ServiceLoop:
    impl = spec.actors.get(implementation)
    if impl is None:
        raise SpecError(
            f"unknown actor implementation {implementation!r}; declared: {', '.join(spec.actors)}", file=spec.file
        )
    target = load_entry(impl.entry, what=f"actor implementation {implementation}")
    if not (inspect.isclass(target) and issubclass(target, Policy)):
        raise SpecError(
            f"actor implementation {implementation!r} ({impl.entry}) is not a trialog.actor.Policy: nothing to learn",
            file=spec.file,
        )
    # The network's sizes from the spaces of the classes it plays (already there in a spec `trialog train` derived).
    config = implementation_sized(spec, implementation, impl.config, classes_played(spec, implementation))
    handler = LearnerHandler(
        implementation,
        target,
        config,
        experiment=experiment,
        model_store=bus.settings.model_store,
        tensorboard=tensorboard,
        learn_from=learn_from,
    )
    return ServiceLoop(bus, handler, group=handler.service_name)


async def main(
    bus: Bus,
    spec: Spec,
    implementation: str,
    *,
    experiment: str = "",
    health_port: int = 0,
    tensorboard: str = "",
    learn_from: tuple[str, ...] = (),
) -> None:
    loop = loop_for(bus, spec, implementation, experiment=experiment, tensorboard=tensorboard, learn_from=learn_from)
    await serve(bus, [loop], name="learner", health_port=health_port)
