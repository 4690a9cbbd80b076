"""Observations and actions read in place (``TickBodies``) give exactly the event that decoding
the record and checking its headers give, or nothing — on the records as logged and on records
altered in every way the reading in place could miss — and a service loop that reads them in
place judges every record as the general way does: the same events, the same refusals."""

from __future__ import annotations

import pytest

from tests.unit.test_replay_feed import logged, variants
from trialog.bus.memory import MemoryBus
from trialog.errors import CodecError
from trialog.protocol.events import HEADER_KIND, Action, Observation
from trialog.protocol.in_place import TickBodies
from trialog.protocol.owners import check_headers
from trialog.runtime.handler import Handler
from trialog.runtime.service import ServiceLoop


@pytest.fixture
def bus(memory_settings):
    return MemoryBus(memory_settings)


def general(bus: MemoryBus, record, kind):
    """Decoded and its headers checked, as a service loop does it without reading in place."""
    try:
        event = bus.codec.decode(record.value, kind)
        check_headers(record.key, record.headers, event)
    except CodecError as exc:
        return f"refused: {exc}"
    return event


async def test_read_in_place_or_not_at_all(bus):
    tid, records = await logged(bus)
    bodies = TickBodies(bus.store)
    for name, altered in variants(bus, tid, records).items():
        for record in altered:
            kind = record.header(HEADER_KIND)
            if kind not in (Observation.KIND, Action.KIND):
                continue
            read = bodies.event(record.key, dict(record.headers), record.value, kind)
            if read is not None:
                assert read == general(bus, record, kind), (name, record.offset)
    # As logged, every observation and action is read in place.
    ticks = [r for r in records if r.header(HEADER_KIND) in (Observation.KIND, Action.KIND)]
    assert len(ticks) > 10
    assert all(bodies.event(r.key, dict(r.headers), r.value, r.header(HEADER_KIND)) is not None for r in ticks)


async def test_what_is_not_read_in_place_is_left_to_the_general_way(bus):
    tid, records = await logged(bus)
    bodies = TickBodies(bus.store)
    cases = variants(bus, tid, records)
    left = set()
    for name, altered in cases.items():
        for record in altered:
            kind = record.header(HEADER_KIND)
            if kind in (Observation.KIND, Action.KIND) and record.value is not None:
                if bodies.event(record.key, dict(record.headers), record.value, kind) is None:
                    left.add(name)
    # Each alteration the general way refuses, or reads another way, is left to it.
    for name in (
        "observation tick header off by one",
        "observation of another trial's key",
        "observation with a byte after it",
        "observation with a flag of 2",
        "observation carrying a reward of nan",
        "observation carrying a reward without its header",
        "observation carrying no reward with the header",
        "observation with two kind headers",
        "observation with an id",
        "action with a receiver",
        "action written as an observation",
        "action cut short",
    ):
        assert name in left, name
    assert "as logged" not in left
    assert "observation with an overlong length" not in left  # Avro reads it the same: so does this


class _Never:
    """A reader in place that reads nothing: every record takes the general way."""

    def event(self, key, h, value, kind):
        return None


class _Judge(Handler):
    """Judges every record (owns all of them): what the loop hands it, and what it letters."""

    service_name = "test"
    topics = ("events",)

    def __init__(self):
        self.events = []

    def must_judge(self, record, kind):
        return True

    def handle(self, record, event):
        self.events.append((record.offset, event))


async def test_a_loop_judges_each_record_as_the_general_way_does(bus, monkeypatch):
    tid, records = await logged(bus)
    for name, altered in variants(bus, tid, records).items():
        judged = {}
        for in_place in (True, False):
            handler = _Judge()
            loop = ServiceLoop(bus, handler, None)
            letters = []
            monkeypatch.setattr(loop, "dead_letter", lambda record, reason, letters=letters: letters.append(
                (record.offset, reason)))  # fmt: skip
            if not in_place:
                monkeypatch.setattr(loop, "_bodies", _Never())
            for record in altered:
                kind = record.header(HEADER_KIND)
                if kind not in (Observation.KIND, Action.KIND):
                    continue
                event = loop._verified(record, True, kind)  # noqa: SLF001
                if event is not None:
                    handler.handle(record, event)
            judged[in_place] = (handler.events, letters)
        assert judged[True] == judged[False], name


async def test_the_gateway_gives_its_seats_the_events_the_general_way_gives(bus):
    from trialog.services.gateway.messages import Decoded

    tid, records = await logged(bus)
    for name, altered in variants(bus, tid, records).items():
        fast, general_way = Decoded(bus), Decoded(bus)
        general_way._bodies = _Never()  # noqa: SLF001
        assert [fast(r) for r in altered] == [general_way(r) for r in altered], name
