"""The model registry on the in-memory bus: every version its own key, the last N kept,
`NAME@VERSION` references, and what a follower reports (newest, or a pinned version)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.conftest import wait_for
from trialog.bus.memory import MemoryBus
from trialog.errors import TrialogError
from trialog.model_registry import (
    SCHEMA,
    ModelFollower,
    encode,
    key_of,
    latest_versions,
    make_version,
    parse_ref,
    prune,
    publish,
    publish_next,
    read_catalog,
)
from trialog.protocol.topics import MODELS


def _version(number: int, model: str = "m"):
    return make_version(model, number, "dqn", {"q/w0": np.full((2, 2), number, np.float32)}, {"env_steps": number})


@pytest.fixture
def bus(memory_settings) -> MemoryBus:
    return MemoryBus(memory_settings)


@pytest.mark.parametrize(
    "ref, expected", [("cartpole-dqn", ("cartpole-dqn", None)), ("cartpole-dqn@12", ("cartpole-dqn", 12))]
)
def test_a_reference_names_a_model_and_maybe_a_version(ref, expected):
    assert parse_ref(ref) == expected


@pytest.mark.parametrize("ref", ["", "@3", "m@", "m@x", "m@0", "m@-1", "a@b@3"])
def test_a_malformed_reference_is_refused(ref):
    with pytest.raises(TrialogError):
        parse_ref(ref)


def test_a_model_name_with_the_separator_is_refused():
    with pytest.raises(TrialogError, match="without '@'"):
        _version(1, model="m@1")


async def test_each_version_is_its_own_key_and_publishing_drops_the_one_kept_versions_older(bus):
    for n in range(1, 6):
        await publish(bus, _version(n), keep=3)
    records = bus.records(MODELS)
    assert [r.key for r in records if r.value] == [key_of("m", n) for n in range(1, 6)]
    assert [r.key for r in records if r.value is None] == [b"m@1", b"m@2"]
    catalog = await read_catalog(bus)
    assert sorted(catalog.versions("m")) == [3, 4, 5]
    assert (await latest_versions(bus))["m"].version == 5
    assert catalog.find("m").version == 5 and catalog.find("m@4").tensors()["q/w0"][0, 0] == 4
    with pytest.raises(TrialogError, match=r"no version 2 \(kept: 3-5\)"):
        catalog.find("m@2")
    with pytest.raises(TrialogError, match="no model 'other'"):
        catalog.find("other")


async def test_the_setting_says_how_many_are_kept_and_0_keeps_all(memory_settings):
    import dataclasses

    for kept, expected in ((2, [4, 5]), (0, [1, 2, 3, 4, 5])):
        bus = MemoryBus(dataclasses.replace(memory_settings, model_versions_kept=kept))
        for n in range(1, 6):
            await publish(bus, _version(n))
        assert sorted((await read_catalog(bus)).versions("m")) == expected


async def test_records_keyed_by_the_bare_name_read_as_versions_and_are_pruned_like_any(bus):
    # As versions were keyed before: the name alone, so that compaction kept only the newest.
    await bus.send_many([(MODELS, b"m", encode(bus, _version(2)), [("schema", SCHEMA.encode())])])
    await publish(bus, _version(3), keep=0)
    await publish(bus, _version(1, model="n"), keep=0)
    catalog = await read_catalog(bus)
    assert sorted(catalog.versions("m")) == [2, 3]
    assert {m: v.version for m, v in catalog.latest().items()} == {"m": 3, "n": 1}
    assert await prune(bus, catalog, "m", keep=1) == 1
    assert bus.records(MODELS)[-1].key == b"m" and bus.records(MODELS)[-1].value is None
    assert sorted((await read_catalog(bus)).versions("m")) == [3]
    assert sorted((await read_catalog(bus)).versions("n")) == [1]


async def test_publishing_the_next_version_numbers_it_after_the_newest_and_prunes_to_the_setting(memory_settings):
    import dataclasses

    bus = MemoryBus(dataclasses.replace(memory_settings, model_versions_kept=2))
    for n in (1, 2, 5):  # numbered with a gap: the prune goes by what is there, not by arithmetic
        await publish(bus, _version(n), keep=0)
    catalog = await read_catalog(bus)
    old = catalog.find("m@2")
    v = await publish_next(bus, catalog, "m", "dqn", old.data(), {"rolled_back_from": 2})
    assert v.version == 6 and v.sha256 == old.sha256 and v.meta == {"rolled_back_from": 2}
    assert sorted((await read_catalog(bus)).versions("m")) == [5, 6]
    assert sorted(catalog.versions("m")) == [5, 6]


async def test_a_follower_reports_what_the_topic_held_once_then_each_newer_version(bus):
    for n in range(1, 5):
        await publish(bus, _version(n), keep=0)
    seen = []
    follower = ModelFollower(bus, lambda v: seen.append((v.model, v.version)))
    follower.start()
    try:
        await wait_for(lambda: seen, what="the newest version")
        await publish(bus, _version(5), keep=0)
        await publish(bus, _version(1, model="n"), keep=0)
        await wait_for(lambda: len(seen) >= 3, what="the live versions")
        await asyncio.sleep(0.05)
    finally:
        await follower.stop()
    assert seen == [("m", 4), ("m", 5), ("n", 1)]


async def test_a_pinned_follower_reports_its_version_only_even_when_published_later(bus):
    for n in (1, 2, 3):
        await publish(bus, _version(n), keep=0)
    seen = []
    follower = ModelFollower(bus, lambda v: seen.append((v.model, v.version)), {"m": 2, "n": 7})
    follower.start()
    try:
        await wait_for(lambda: seen, what="the pinned version")
        for n in range(4, 9):
            await publish(bus, _version(n, model="n"), keep=0)
        await publish(bus, _version(4), keep=0)
        await wait_for(lambda: len(seen) >= 2, what="the pinned version published later")
        await asyncio.sleep(0.05)
    finally:
        await follower.stop()
    assert seen == [("m", 2), ("n", 7)]
