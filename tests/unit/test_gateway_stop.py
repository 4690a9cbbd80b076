"""The gateway stops within a bound even when one of its Kafka clients never closes
(a broker gone, a request never answered): SIGTERM must end the process."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from trialog.services.gateway import app


class _Part:
    def __init__(self, stuck: bool):
        self.stuck, self.stopped = stuck, False

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.stuck:
            await asyncio.Event().wait()  # never set
        self.stopped = True


async def test_a_part_that_never_stops_is_left_after_its_time_and_the_next_still_stops(monkeypatch):
    monkeypatch.setattr(app, "STOP_WITHIN_S", 0.2)
    stuck, fine = _Part(stuck=True), _Part(stuck=False)
    began = time.monotonic()
    for part in (stuck, fine):
        await app._stop(part)
    assert time.monotonic() - began < 1.0
    assert not stuck.stopped and fine.stopped


@pytest.mark.parametrize("stuck", [False, True])
async def test_the_lifespan_ends_within_its_bound(monkeypatch, stuck):
    monkeypatch.setattr(app, "STOP_WITHIN_S", 0.2)
    parts = [_Part(stuck=stuck and i == 0) for i in range(3)]
    lifespan = app._lifespan(SimpleNamespace(feed=parts[0], controller=parts[1], dashboard=parts[2]))  # all it reads
    began = time.monotonic()
    async with lifespan(None):
        pass
    assert time.monotonic() - began < 1.5
    assert [p.stopped for p in parts] == [not stuck, True, True]
