"""Trials over several service processes, a service killed mid-trial (I-7), bad records (I-8)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.integration.test_trials import read_trial
from trialog.bus.kafka import KafkaBus
from trialog.controller import Controller
from trialog.protocol.events import Action, Observation, TrialEnded
from trialog.tools.campaign import local_services, start_service, stop_services, wait_ready

pytestmark = pytest.mark.integration
SPEC = str(Path(__file__).resolve().parent / "trialtest.yaml")
PATIENT_SPEC = str(Path(__file__).resolve().parent / "trialtest_patient.yaml")


def trajectory(events) -> dict[tuple[str, int, str], bytes]:
    """(kind, tick, actor) -> payload; a duplicate must be identical (I-8)."""
    out: dict[tuple[str, int, str], bytes] = {}
    for e in events:
        if isinstance(e, Observation | Action):
            key = (e.KIND, e.tick, e.actor)
            assert out.setdefault(key, e.payload) == e.payload, f"conflicting duplicate {key}"
    return out


async def test_fifty_concurrent_trials_over_two_processes_each(kafka_settings, tmp_path):
    bus = KafkaBus(kafka_settings)
    await bus.create_topics()
    with local_services(kafka_settings, SPEC, environment_processes=2, actor_processes=2, log_dir=str(tmp_path)):
        async with Controller(bus) as ctl:
            ids = [
                await ctl.start_trial("trialtest", seed=i, max_ticks=8 + i % 5, environment="slow") for i in range(50)
            ]
            ends = await asyncio.gather(*(ctl.wait_ended(t, timeout=180) for t in ids))
    assert [e.reason for e in ends] == ["max_ticks"] * 50
    assert [e.tick for e in ends] == [8 + i % 5 for i in range(50)]
    async with bus:
        for tid, end in zip(ids[:10], ends[:10]):
            obs_ticks = {e.tick for e in await read_trial(bus, tid) if isinstance(e, Observation)}
            assert obs_ticks == set(range(end.tick + 1))


@pytest.mark.parametrize("service", ["environment", "actors", "orchestrator"])
async def test_service_killed_mid_trial_finishes_with_the_same_trajectory(kafka_settings, tmp_path, service):
    bus = KafkaBus(kafka_settings)
    await bus.create_topics()
    logs = tmp_path
    procs, ports = {}, {}
    # A response timeout longer than a takeover: the trajectory must not depend on the crash.
    for name in ("orchestrator", "actors", "environment"):
        procs[name], ports[name] = start_service(kafka_settings, PATIENT_SPEC, [name], logs / f"{name}.log")
    try:
        wait_ready(procs, ports, logs)
        async with Controller(bus) as ctl:
            reference = await ctl.start_trial(
                "trialtest-patient", seed=11, environment="slow", max_ticks=100, environment_config={"delay_s": 0.1}
            )
            assert (await ctl.wait_ended(reference, timeout=120)).reason == "max_ticks"

            tid = await ctl.start_trial(
                "trialtest-patient", seed=11, environment="slow", max_ticks=100, environment_config={"delay_s": 0.1}
            )
            await wait_for(lambda: ctl.last_tick(tid) >= 15, timeout=60, what="tick 15")
            # A second instance joins the group, then the first dies without a word.
            procs["standby"], ports["standby"] = start_service(
                kafka_settings, PATIENT_SPEC, [service], logs / "standby.log"
            )
            await asyncio.sleep(3)
            procs[service].send_signal(signal.SIGKILL)
            killed_at = ctl.last_tick(tid)
            end = await ctl.wait_ended(tid, timeout=120)
        assert 15 <= killed_at < 90
        assert end.reason == "max_ticks" and end.tick == 100
        async with bus:
            expected = trajectory(await read_trial(bus, reference))
            events = await read_trial(bus, tid)
        assert trajectory(events) == expected
        assert sum(isinstance(e, TrialEnded) for e in events) == 1
    finally:
        stop_services(procs.values())


async def test_bad_records_go_to_dead_letters_while_trials_finish(kafka_settings, tmp_path):
    bus = KafkaBus(kafka_settings)
    await bus.create_topics()
    with local_services(kafka_settings, SPEC, log_dir=str(tmp_path)):
        async with Controller(bus) as ctl:
            ids = [await ctl.start_trial("trialtest", seed=i, environment="slow", max_ticks=20) for i in range(3)]
            await wait_for(lambda: all(ctl.last_tick(t) >= 2 for t in ids), timeout=60, what="trials under way")
            garbage = [("events", ids[0].encode(), b"\x00not avro at all", [("kind", b"action")])]  # untagged: refused
            # Tagged with alice's key (this process holds the keyring), but not alice's action schema.
            wrong_schema = [
                bus.to_record(
                    "events", Action(ids[1], tick=ctl.last_tick(ids[1]), actor="alice", payload=b"\xc3\x01bad")
                )
            ]
            unknown_trial = [
                (
                    "events",
                    b"no-such-trial",
                    bus.codec.encode(Action("no-such-trial", tick=0, actor="alice")),
                    Action("no-such-trial", tick=0, actor="alice").headers(),
                )
            ]
            await bus.send_many(garbage + wrong_schema + unknown_trial)
            ends = [await ctl.wait_ended(t, timeout=120) for t in ids]
        assert [e.reason for e in ends] == ["max_ticks"] * 3
        reader = bus.consumer(["dead-letters"])
        await reader.start()
        letters = []
        try:
            for _ in range(10):  # long enough for a second letter of the same record to show up
                letters += [bus.store.decode(r.value) for r in await reader.poll(timeout_ms=500)]
        finally:
            await reader.stop()
    reasons = " | ".join(sorted(letter["reason"] for letter in letters))
    assert "refused: action from '' is not tagged" in reasons or "refused: action from '': not an actor" in reasons
    assert "does not match its schema" in reasons
    assert any(
        letter["key"] == b"no-such-trial" and letter["service"] == "orchestrator" for letter in letters
    )  # unknown trials are its own
    assert any(letter["key"] == ids[0].encode() and letter["value"] == b"\x00not avro at all" for letter in letters)
    assert len(letters) == 3, reasons  # each bad record once, by its one owner
