"""What counts, on the real broker: the datalog counts exactly what the environment applied
(a client seat's action refused for its holder is no played action), and a late reward
after an orchestrator restart is judged as before the restart — lettered and counted
never both (tests/unit/test_what_counts.py has the rules in memory)."""

from __future__ import annotations

import pytest

from tests.harness import deployment
from tests.integration.fixtures import rps_with_a_seat
from trialog.actor import EndEvent, ObservationEvent
from trialog.bus.kafka import KafkaBus
from trialog.client import join
from trialog.datalog.replay import read_trial
from trialog.events import Action
from trialog.spec import load_spec
from trialog.topics import EVENTS
from trialog.trust import MAC_PREFIX, Authenticator, Keyring, compute_tag, mac_input, mint_join_token

pytestmark = pytest.mark.integration


async def letters_of(bus: KafkaBus, tid: str) -> list[dict]:
    """Every dead letter about trial ``tid`` so far (read until the topic is quiet)."""
    reader = bus.consumer(["dead-letters"])
    await reader.start()
    try:
        out, quiet = [], 0
        while quiet < 3:
            records = await reader.poll(timeout_ms=500)
            quiet = 0 if records else quiet + 1
            out += [bus.store.decode(r.value) for r in records if r.key == tid.encode()]
        return out
    finally:
        await reader.stop()


def holderless(client: KafkaBus, tid: str, tick: int, move: str) -> tuple:
    """Bob's action for ``tick``, tagged with his seat's key (from his join token) but
    without the ``holder`` header: genuine, yet not from the seat's holder."""
    action = Action(tid, tick=tick, actor="bob", payload=client.store.encode("rps.Move", move))
    value, headers = client.codec.encode(action), action.headers()
    tag = compute_tag(client.trust.keyring.key("seat.bob", tid), mac_input(tid.encode(), dict(headers), value))
    return (EVENTS, tid.encode(), value, [*headers, (MAC_PREFIX + "seat.bob", tag)])


async def test_a_seat_action_refused_for_its_holder_is_no_played_action(kafka_settings, tmp_path):
    spec_file = tmp_path / "seat.yaml"
    spec_file.write_text(rps_with_a_seat("seat", max_ticks=6).replace("response_timeout_ms: 20000", "response_timeout_ms: 1500"))
    bus = KafkaBus(kafka_settings)
    spec = load_spec(spec_file, bus.store)
    sent = []
    async with deployment(bus, spec) as (_, ctl):
        tid = await ctl.start_trial("seat", seed=3)
        token = mint_join_token(Keyring.load(bus.settings), tid, "bob")
        client = KafkaBus(bus.settings)
        client.trust = Authenticator(Keyring({}))  # a person's page: the join token's seat key only
        async with join(client, tid, "bob", token=token, holder="bob-1", timeout=30) as session:
            async for event in session:
                match event:
                    case ObservationEvent(final=False, tick=tick) if tick in (1, 3):
                        sent += await client.send_many([holderless(client, tid, tick, "SCISSORS")])
                    case ObservationEvent(final=False):
                        session.act("PAPER")
                    case EndEvent(reason=reason):
                        break
        assert reason == "max_ticks"
        await ctl.wait_ended(tid, timeout=30)
    letters = await wait_for_letters(bus, tid, 2)
    assert sorted((d["offset"], d["service"]) for d in letters) == sorted((s.offset, "environment") for s in sent)
    assert all("refused: action at tick" in d["reason"] and "holder" in d["reason"] for d in letters)
    async with bus:
        fold = await read_trial(bus, tid)
    samples = {(s.tick, s.actor): s for s in fold.samples()}
    bob = {t: (s.action, s.timed_out) for (t, a), s in samples.items() if a == "bob" and t < 6}
    assert bob == {t: ("ROCK", True) if t in (1, 3) else ("PAPER", False) for t in range(6)}
    # What the environment applied: alice's next observation names bob's move.
    assert {t: m for t, (m, _) in bob.items()} == {t: samples[(t + 1, "alice")].observation["their_last_move"] for t in range(6)}
    assert fold.check() == []


async def wait_for_letters(bus: KafkaBus, tid: str, count: int) -> list[dict]:
    found: list[dict] = []

    async def enough() -> bool:
        found[:] = await letters_of(bus, tid)
        return len(found) >= count

    for _ in range(20):
        if await enough():
            return found
    raise AssertionError(f"{len(found)} dead letters for {tid}, wanted {count}: {found}")

