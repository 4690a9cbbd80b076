"""What counts, on the real broker: the datalog counts exactly what the environment applied
(a client seat's action refused for its holder is no played action), and a late reward
after an orchestrator restart is judged as before the restart — lettered and counted
never both (tests/unit/test_what_counts.py has the rules in memory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.harness import deployment
from tests.integration.fixtures import rps_with_a_seat
from trialog.actor import EndEvent, ObservationEvent
from trialog.bus.kafka import KafkaBus
from trialog.client_actor import join
from trialog.controller import Controller
from trialog.datalog.archive import Archive
from trialog.datalog.replay import read_trial
from trialog.protocol.events import Action, Reward
from trialog.protocol.topics import EVENTS
from trialog.spec import load_spec
from trialog.tools.campaign import start_service, stop_services, wait_ready
from trialog.trust.authenticator import Authenticator
from trialog.trust.join_tokens import mint_join_token
from trialog.trust.keys import Keyring
from trialog.trust.tags import MAC_PREFIX, compute_tag, mac_input

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
    spec_file.write_text(
        rps_with_a_seat("seat", max_ticks=6).replace("response_timeout_ms: 20000", "response_timeout_ms: 1500")
    )
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
    assert {t: m for t, (m, _) in bob.items()} == {
        t: samples[(t + 1, "alice")].observation["their_last_move"] for t in range(6)
    }
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


# --- a late reward after an orchestrator restart ---------------------------------------------------------

SPEC = str(Path(__file__).resolve().parent / "trialtest.yaml")


def late_rewards(tid: str, tick: int) -> list[Reward]:
    """Retroactive rewards for ``tick`` of an ended trial: two that count (from an actor of the
    trial, and from a judge outside it) and two that do not (naming a stranger, out of bounds)."""
    return [
        Reward(tid, tick=tick, receiver="bob", value=2.0, sender="alice"),
        Reward(tid, tick=tick, receiver="alice", value=3.0, sender="judge"),
        Reward(tid, tick=tick, receiver="carol", value=5.0, sender="judge"),
        Reward(tid, tick=tick, receiver="*", value=1e13, sender="judge"),
    ]


def counted(samples, tick: int) -> set[tuple[str, str, float]]:
    """The rewards of samples at ``tick`` (but the environment's): (sender, receiver, value)."""
    return {
        (r.sender, r.receiver, r.value)
        for s in samples
        if s.tick == tick
        for r in s.reward_sources
        if r.sender != "env"
    }


async def test_a_late_reward_after_a_restart_is_judged_and_archived_as_before_it(kafka_settings, tmp_path):
    """A trial ends; the orchestrator and the logger processes restart (each resumes past the
    ended trial and no longer holds it); retroactive rewards for a past tick then come, from
    an actor of the trial and from a judge. The orchestrator letters exactly what it lettered
    before the restart and nothing else; replay and the archive count exactly the rest."""
    bus = KafkaBus(kafka_settings)
    await bus.create_topics()
    archive_dir = tmp_path / "archive"
    services = {"orchestrator": ["orchestrator"], "environment": ["environment"], "actors": ["actors"],
                "logger": ["logger", "--archive-dir", str(archive_dir), "--grace", "0.5"]}  # fmt: skip
    procs, ports = {}, {}
    for name, args in services.items():
        procs[name], ports[name] = start_service(kafka_settings, SPEC, args, tmp_path / f"{name}.log")
    try:
        wait_ready(procs, ports, tmp_path)
        async with Controller(bus) as ctl:
            tid = await ctl.start_trial("trialtest", seed=2, max_ticks=5)
            assert (await ctl.wait_ended(tid, timeout=60)).tick == 5
            before = await bus.publish_all(EVENTS, late_rewards(tid, 1))  # judged by the processes that saw the trial
            letters = await wait_for_letters(bus, tid, 2)
            archive = Archive(archive_dir)
            await wait_for(
                lambda: archive.refresh() or archive.entry(tid) is not None, timeout=30, what="the trial archived"
            )
            for name in ("orchestrator", "logger"):  # they resume past the ended trial, which they no longer hold
                procs[name].terminate()
                procs[name].wait(timeout=30)
                procs[name], ports[name] = start_service(
                    kafka_settings, SPEC, services[name], tmp_path / f"{name}-2.log"
                )
            wait_ready(procs, ports, tmp_path)
            after = await bus.publish_all(EVENTS, late_rewards(tid, 2))
            letters = await wait_for_letters(bus, tid, 4)
            await wait_for(
                lambda: archive.refresh() or len(counted(archive.read(tid).samples, 2)) >= 2,
                timeout=20,
                what="the two late rewards that count archived",
            )
        fold = await read_trial(bus, tid)
    finally:
        stop_services(procs.values())
    by_offset = {(d["partition"], d["offset"]): d["reason"] for d in letters}
    assert len(letters) == 4, "\n".join(f"{d['offset']}: {d['reason']}" for d in letters)
    for delivered in (before, after):
        assert [(d.partition, d.offset) in by_offset for d in delivered] == [False, False, True, True], by_offset
    assert "addresses no actor" in by_offset[(after[2].partition, after[2].offset)]
    assert "value 10000000000000.0" in by_offset[(after[3].partition, after[3].offset)]
    # Counted exactly what was not lettered, after the restart as before it, in replay and in the archive.
    counts = {("alice", "bob", 2.0), ("judge", "alice", 3.0)}
    archived = archive.read(tid).samples
    assert (
        counted(fold.samples(), 1)
        == counted(fold.samples(), 2)
        == counted(archived, 1)
        == counted(archived, 2)
        == counts
    )
