"""A judge spaces its ratings so that the gateway's per-address limit never refuses one,
however many trials it watches and however much history it catches up at once."""

from __future__ import annotations

import asyncio

from trialog.services.gateway.door import Bucket, Limits
from trialog.tools import judge


async def test_a_judges_ratings_stay_within_what_the_gateway_lets_one_address_send(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(judge.time, "monotonic", lambda: clock[0])
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:  # time passes only when a send waits for its turn
        wake = clock[0] + seconds
        await real_sleep(0)
        clock[0] = max(clock[0], wake)

    monkeypatch.setattr(judge.asyncio, "sleep", sleep)
    spacing = judge._Spacing(judge.RATINGS_PER_S)
    gateway = Bucket(Limits().messages_per_s_address)
    gateway.stamp = clock[0]
    sent: list[float] = []

    async def trial(n: int) -> None:  # a trial's ratings, all owed at once (a caught-up history)
        for _ in range(n):
            await spacing.turn()
            sent.append(clock[0])
            assert gateway.take(clock[0]), f"refused after {len(sent)} ratings at t={clock[0] - 1000:.3f} s"

    await asyncio.gather(*(trial(300) for _ in range(16)))
    assert len(sent) == 4800
    seconds = sent[-1] - sent[0]
    # A second's worth at once, then the rate: neither faster than allowed nor much slower.
    expected = (4800 - judge.RATINGS_PER_S) / judge.RATINGS_PER_S
    assert expected * 0.98 <= seconds <= expected * 1.02, seconds
