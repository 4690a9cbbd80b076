"""The PPO learner service's committed offset (I-7): it advances past the trials whose
transitions a published version was trained on, and never past the start of a trial whose
transitions a restarted learner still needs (those not yet in a published version's batch),
so that a learner restarted from its last version, reading the log again from the committed
offset, holds the very transitions it held."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from tests.harness import cartpole_trials
from trialog.bus.base import Record
from trialog.bus.memory import MemoryBus
from trialog.learn.ppo import PPOPolicy
from trialog.protocol.events import Action
from trialog.protocol.topics import EVENTS
from trialog.services.learner.handler import LearnerHandler

ROOT = Path(__file__).resolve().parents[2]
CONFIG = {"model": "m", "observation_size": 4, "actions": 2, "hidden": [8], "rollout_steps": 4, "update_epochs": 1}


async def trials_of(settings, seeds: list[int]) -> tuple[MemoryBus, list[list[tuple[Record, object]]]]:
    bus, logged = await cartpole_trials(settings, seeds)
    return bus, list(logged.values())


def laid_out(bus: MemoryBus, sequence: list[tuple[Record, object]], switch: int) -> list[tuple[Record, object]]:
    """The records as one partition's log, in this order; the actions before ``switch`` acted
    by version 1, the others by version 2 (written again so: the learner reads actions' bytes)."""
    out = []
    for i, (r, e) in enumerate(sequence):
        value, headers = r.value, r.headers
        if isinstance(e, Action):
            e = dataclasses.replace(e, policy_version=1 if i < switch else 2)
            _, _, value, headers = bus.to_record(EVENTS, e)
        out.append((Record(EVENTS, 0, i, r.key, value, tuple(headers), r.timestamp_ms), e))
    return out


def learner_at(bus, version: int) -> LearnerHandler:
    """A learner service whose actors act with ``version``; publishing is acknowledged at once."""
    handler = LearnerHandler("random", PPOPolicy, CONFIG)
    handler.loop = SimpleNamespace(bus=bus)
    handler.restored.set()

    async def publish(loss, rounds, number=None):
        handler.version = number
        handler._published()

    handler._publish = publish
    handler.version = version
    handler._published()
    return handler


def feed(handler: LearnerHandler, records) -> None:
    """The records as the learner service reads them."""
    for record, event in records:
        if handler.should_decode(record, event.KIND):
            handler.handle(record, event)


def held(handler: LearnerHandler, version: int) -> list[bytes]:
    """The transitions acted by ``version`` the learner holds for its next batch."""
    return sorted(
        row.tobytes()
        for t, *_ in handler.learner.pending
        for row, v in zip(np.hstack([t.observations, t.actions[:, None]]), t.versions)
        if v == version
    )


def restarted(bus, records, handler: LearnerHandler) -> LearnerHandler:
    """A learner restarted from ``handler``'s last version, reading the log from the offset it
    would commit."""
    commit = handler.safe_offset(EVENTS, 0)
    again = learner_at(bus, handler.version)
    feed(again, [(r, e) for r, e in records if r.offset >= (commit or 0)])
    return again


async def test_the_committed_offset_passes_the_trials_a_published_version_trained_on(memory_settings):
    bus, (t1, t2, t3, t4) = await trials_of(memory_settings, [1, 2, 3, 4])
    n12 = len(t1) + len(t2)
    records = laid_out(bus, t1 + t2 + t3 + t4, n12)
    handler = learner_at(bus, 1)
    feed(handler, records[:n12])
    assert handler.learner.rounds_due()
    await handler._train()  # version 2 published, trained on the transitions of trials 1 and 2
    assert handler.version == 2 and handler.learner.round_scalars["batch"] > 0
    feed(handler, records[n12:])
    # Trials 1 and 2 are trained on: a restart does not need them, the offset moves on to trial 3's start.
    assert handler.safe_offset(EVENTS, 0) == n12
    again = restarted(bus, records, handler)
    assert held(again, 2) == held(handler, 2) != []


async def test_a_trial_that_outlived_the_batch_is_kept_though_later_trials_ended_after_it(memory_settings):
    """Trials in flight together: the one that started first (a) ends first, with transitions
    acted after the batch was taken; the one ending after it (b) began before the batch too.
    Trial a's start stays the committed offset, though b and c hold more transitions than
    are still needed."""
    bus, trials = await trials_of(memory_settings, list(range(1, 9)))
    a, b = sorted(trials, key=len)[:: len(trials) - 1]  # the shortest and the longest
    c = next(t for t in trials if t is not a and t is not b)
    interleaved = [x for pair in zip(a, b) for x in pair] + b[len(a) :]
    # The batch is taken before a's last two actions: a few of a's transitions are still needed,
    # fewer than b has ahead of them.
    switch = [i for i, (_, e) in enumerate(interleaved) if isinstance(e, Action) and any(e is x for _, x in a)][-2]
    records = laid_out(bus, interleaved + c, switch)
    handler = learner_at(bus, 1)
    feed(handler, records[:switch])
    assert handler.learner.rounds_due()
    await handler._train()
    feed(handler, records[switch:])
    assert held(handler, 2) and handler.safe_offset(EVENTS, 0) == 0
    again = restarted(bus, records, handler)
    assert held(again, 2) == held(handler, 2)
