"""The gateway on the real broker, through its sockets as a page uses them: a person
plays a whole trial, reconnects mid-trial, judges a past tick; bad links are refused."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import httpx
import pytest

from tests.gateway.kit import people_deployment, play, seat_url, socket
from tests.integration.test_trials import read_trial
from trialog.controller import join_link as link
from trialog.protocol.events import Action, ActorJoined, Reward
from trialog.services.gateway.door import Limits
from trialog.trust.keys import Keyring

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
async def running(kafka_settings):
    async with people_deployment(kafka_settings, EXAMPLES / "rps" / "spec.yaml") as running:
        yield running


async def test_a_person_plays_reconnects_and_the_log_has_their_moves(running):
    bus, ctl, base = running
    tid = await ctl.start_trial("rps", implementations={"bob": "human"}, max_ticks=12)
    url = seat_url(link(base, bus.trust.keyring, tid, "bob"))
    async with socket(url) as seat:
        welcome = await seat.next("welcome")
        assert welcome["actor"] == "bob" and welcome["classes"]["player"]["action_schema"]["symbols"] == [
            "ROCK",
            "PAPER",
            "SCISSORS",
        ]
        first = await play(seat, "PAPER", until_tick=3)
    # Reconnect (a reload, or another gateway instance): the seat resumes from the log.
    async with socket(url) as seat:
        assert (await seat.next("welcome"))["actor"] == "bob"
        rest = await play(seat, "SCISSORS")
    ended = await ctl.wait_ended(tid, timeout=30)
    events = await read_trial(bus, tid)
    bob = [e for e in events if isinstance(e, Action) and e.actor == "bob"]
    assert [a.tick for a in bob] == first + rest and len(first) == 4 and rest[0] == 4
    assert ended.reason in ("max_ticks", "environment")
    assert [e.actor for e in events if isinstance(e, ActorJoined)] == [
        "bob"
    ]  # joined once, resumed without a second join


async def test_a_watcher_judges_a_past_tick(running):
    bus, ctl, base = running
    tid = await ctl.start_trial("rps", max_ticks=8)
    await ctl.wait_ended(tid, timeout=30)
    async with socket(f"{base}/ws/watch/{tid}") as watch:
        trial = await watch.next("trial")
        assert {a["name"] for a in trial["actors"]} == {"alice", "bob"}
        await watch.next("live")
        await watch.send(
            {"type": "reward", "judge": "ada", "receiver": "alice", "tick": 2, "value": 1, "confidence": 0.5}
        )
        assert (await watch.next("rewarded", "error"))["type"] == "rewarded"
        await watch.send({"type": "reward", "judge": "ada", "receiver": "nobody", "tick": 2, "value": 1})
        assert "no actor" in (await watch.next("rewarded", "error"))["reason"]
        await watch.send({"type": "reward", "judge": "ada", "receiver": "alice", "tick": 99, "value": 1})
        assert "tick" in (await watch.next("rewarded", "error"))["reason"]

    async def judged():
        return [e for e in await read_trial(bus, tid) if isinstance(e, Reward) and e.sender == "person:ada"]

    for _ in range(50):
        if found := await judged():
            break
        await asyncio.sleep(0.1)
    assert [(r.receiver, r.tick, r.value, r.confidence) for r in found] == [("alice", 2, 1.0, 0.5)]


async def test_bad_links_are_refused(running):
    bus, ctl, base = running
    keyring = bus.trust.keyring
    tid = await ctl.start_trial("rps", implementations={"bob": "human"}, max_ticks=4)
    genuine = link(base, keyring, tid, "bob")
    altered = genuine[:-4] + ("A" if genuine[-4] != "A" else "B") + genuine[-3:]  # one character of the MAC
    for url, why in [
        (seat_url(f"{base}/play?token=garbage"), "damaged"),
        (seat_url(link(base, Keyring.generate(), tid, "bob")), "not issued by this deployment"),  # another deployment's
        (seat_url(altered), "not issued by this deployment"),
        (seat_url(link(base, keyring, tid, "bob", ttl_s=-1)), "expired"),
        (seat_url(link(base, keyring, tid, "alice")), "no seat"),  # alice is played by an agent
        (seat_url(genuine, holder=""), "holder"),
    ]:
        async with socket(url) as seat:
            assert why in (await seat.next("refused"))["reason"]
    async with httpx.AsyncClient(base_url=base) as http:
        lobby = (await http.get("/api/lobby")).json()
        assert any(t["trial"] == tid and t["seats"] == ["bob"] for t in lobby["trials"] if t["status"] == "pending")
        assert (await http.post("/api/seat", json={"trial": tid, "actor": "alice"})).status_code == 404
    await ctl.terminate(tid, hard=True)


async def test_one_holder_per_seat_and_an_explicit_takeover(running):
    bus, ctl, base = running
    tid = await ctl.start_trial("rps", implementations={"bob": "human"}, max_ticks=30)
    url = link(base, bus.trust.keyring, tid, "bob")
    async with socket(seat_url(url, "laptop")) as first:
        await first.next("welcome")
        await play(first, "ROCK", until_tick=1)
        # Another page (another holder) is refused, and told it may take the seat over...
        async with socket(seat_url(url, "phone")) as second:
            refused = await second.next("refused")
            assert refused["held"] and "held by another page" in refused["reason"]
        # ...but not while the holder's page is still there.
        async with socket(seat_url(url, "phone", takeover=True)) as second:
            refused = await second.next("refused")
            assert refused["held"] and "still connected" in refused["reason"]
    # Once the holder's page is closed and silent (10 s by default), the takeover goes through.
    await asyncio.sleep(Limits().takeover_after_s + 0.5)
    async with socket(seat_url(url, "phone", takeover=True)) as second:
        await second.next("welcome")
        await play(second, "PAPER", until_tick=4)
    await ctl.terminate(tid, hard=True)
    events = await read_trial(bus, tid)
    joins = [e for e in events if isinstance(e, ActorJoined)]
    assert len(joins) == 2  # the first holder's join and the takeover; the refused pages wrote nothing


async def test_trial_start_prints_the_join_links_before_it_waits(running, kafka_settings):
    """`trialog trial start … --wait` with a client seat: the ID and the link come first (the
    trial waits for the person, who needs the link), then the end."""
    bus, ctl, base = running
    env = {
        **os.environ,
        "TRIALOG_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "TRIALOG_TOPIC_PREFIX": kafka_settings.topic_prefix,
        "TRIALOG_PARTITIONS": str(kafka_settings.partitions),
        "TRIALOG_GATEWAY_URL": base,
        "TRIALOG_SPEC": str(EXAMPLES / "rps" / "spec.yaml"),
    }
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "trialog.cli", "trial", "start", "rps", "--implementation", "bob=human",
        "--max-ticks", "5", "--wait",
        stdout=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    trial_id = (await asyncio.wait_for(cli.stdout.readline(), 60)).decode().strip()
    seat_line = (await asyncio.wait_for(cli.stdout.readline(), 60)).decode().strip()
    assert seat_line.startswith(f"bob: {base}/play?token=")
    async with socket(seat_url(seat_line.removeprefix("bob: "))) as seat:
        assert (await seat.next("welcome"))["trial"] == trial_id
        await play(seat, "ROCK")
    out, _ = await asyncio.wait_for(cli.communicate(), 60)
    assert cli.returncode == 0 and f"{trial_id} ended:" in out.decode()
