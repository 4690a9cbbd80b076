"""A rollback while the model's learner runs: a version number names one set of weights
forever. The rollback publishes the old weights under a new number (the newest plus one);
the running learner sees it on `models`, numbers its next version after it, and trains on
from the weights rolled back to."""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace

import numpy as np

from trialog import model_registry
from trialog.bus.memory import MemoryBus
from trialog.learn.dqn import DQNPolicy
from trialog.services.learner.handler import LearnerHandler
from trialog.settings import Settings

CONFIG = {"observation_size": 4, "actions": 2, "hidden": [8], "model": "m", "learning_starts": 10**9}


async def rollback(bus, ref: str) -> model_registry.ModelVersion:
    """What `trialog models rollback` does (trialog.commands.models)."""
    catalog = await model_registry.read_catalog(bus)
    old = catalog.find(ref)
    meta = {**old.meta, "rolled_back_from": old.version}
    return await model_registry.publish_next(bus, catalog, old.model, old.algorithm, old.data(), meta)


async def until(condition, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


async def test_a_learner_running_through_a_rollback_numbers_its_next_version_after_it():
    bus = MemoryBus(Settings.load({}, environ={}))
    async with bus:
        await bus.create_topics()
        handler = LearnerHandler("dqn", DQNPolicy, CONFIG)
        handler.loop = SimpleNamespace(bus=bus)
        await handler._restore()
        for _ in range(3):  # versions 1-3, the weights moved between them
            handler.learner.params = {k: v + 1.0 for k, v in handler.learner.params.items()}
            await handler._train()
        assert handler.version == 3
        rolled = await rollback(bus, "m@1")
        assert rolled.version == 4
        with contextlib.suppress(AssertionError):  # the learner has seen it on `models`
            await until(lambda: getattr(handler, "newest", 0) == 4, timeout=2.0)
        await handler._train()
        await handler.close()
        versions = (await model_registry.read_catalog(bus)).versions("m")
    # Every number once, each with the weights first published under it: 4 is the rollback's.
    assert sorted(versions) == [1, 2, 3, 4, 5] and handler.version == 5
    assert versions[4].sha256 == versions[1].sha256 and versions[4].meta["rolled_back_from"] == 1
    # The learner went on from the weights rolled back to (it trained none since: version 5 holds them).
    one, five = versions[1].tensors(), versions[5].tensors()
    assert all(np.array_equal(one[k], five[k]) for k in one if k.startswith("q/"))
    assert versions[5].meta["env_steps"] == handler.learner.env_steps
