"""Run a whole deployment (orchestrator, environment and actor hosts) inside one
test's event loop, on either bus: the same scenario runs in memory and on Kafka."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from trialog.bus.base import Bus, Record
from trialog.controller import Controller
from trialog.runtime.service import ServiceLoop
from trialog.services.actors.main import loops_for as actor_loops
from trialog.services.environment.main import loops_for as env_loops
from trialog.services.orchestrator.main import loop_for as orchestrator_loop
from trialog.spec import Spec


class Deployment:
    def __init__(self, bus: Bus, specs: list[Spec]):
        self.bus = bus
        self.specs = specs
        self.loops: list[ServiceLoop] = []
        self.tasks: list[asyncio.Task] = []

    def add(self, loops: list[ServiceLoop]) -> list[ServiceLoop]:
        for loop in loops:
            self.loops.append(loop)
            self.tasks.append(asyncio.create_task(loop.run()))
        return loops

    async def ready(self, timeout: float = 30) -> None:
        await asyncio.wait_for(asyncio.gather(*(loop.ready.wait() for loop in self.loops)), timeout)

    async def stop(self, timeout: float = 60) -> None:
        for loop in self.loops:
            loop.stop()
        # Bounded: a loop stuck on a call that never returns fails its test, not the whole run.
        results = await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), timeout)
        for r in results:
            if isinstance(r, Exception):
                raise r


@contextlib.asynccontextmanager
async def deployment(
    bus: Bus, specs: Spec | list[Spec], *, env=True, actors=True, orchestrator=True
) -> AsyncIterator[tuple[Deployment, Controller]]:
    """Services for ``specs`` (environment and actor hosts for every implementation
    of the first spec; the orchestrator serves them all) and a controller."""
    specs = specs if isinstance(specs, list) else [specs]
    await bus.create_topics()
    async with bus:
        d = Deployment(bus, specs)
        if orchestrator:
            d.add([orchestrator_loop(bus, specs)])
        if env:
            d.add(env_loops(bus, specs[0]))
        if actors:
            d.add(actor_loops(bus, specs[0]))
        try:
            await d.ready()
            async with Controller(bus) as ctl:
                yield d, ctl
        finally:
            await d.stop()


async def cartpole_trials(settings, seeds) -> tuple[Any, dict[str, list[tuple[Record, Any]]]]:
    """Random CartPole trials of the train phase on an in-memory bus: each trial's records as
    logged, decoded (what a learner service is fed)."""
    from pathlib import Path

    from trialog.bus.memory import MemoryBus
    from trialog.protocol.topics import EVENTS
    from trialog.spec import load_spec

    bus = MemoryBus(settings)
    spec = load_spec(Path(__file__).resolve().parents[1] / "examples" / "cartpole" / "spec.yaml", bus.store)
    async with deployment(bus, spec) as (_, ctl):
        tids = [
            await ctl.start_trial("cartpole", seed=s, implementations={"agent": "random"}, phase="train") for s in seeds
        ]
        for tid in tids:
            await ctl.wait_ended(tid, timeout=30)
    return bus, {
        tid: [(r, bus.codec.decode(r.value, r.header("kind"))) for r in bus.records(EVENTS) if r.trial_id == tid]
        for tid in tids
    }
