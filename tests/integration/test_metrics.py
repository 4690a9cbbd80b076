"""Prometheus metrics of every service, scraped during a campaign on the real broker and
checked against what the log holds: ticks, actor timeouts, trials ended by reason,
rewards (live and retroactive) and dead letters."""

from __future__ import annotations

import asyncio
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import wait_for
from trialog.bus.kafka import KafkaBus
from trialog.controller import Controller
from trialog.protocol.events import BY_KIND, HEADER_KIND, HEADER_REWARD, HEADER_TICK, DeadLetter
from trialog.protocol.topics import DEAD_LETTERS, EVENTS
from trialog.telemetry.metrics import reason_category
from trialog.tools.campaign import start_service, stop_services, wait_ready

pytestmark = pytest.mark.integration
SPEC = str(Path(__file__).resolve().parent / "trialtest.yaml")
SERVICES = {
    "orchestrator": ["orchestrator"],
    "environment": ["environment"],
    "actors": ["actors"],
    "logger": ["logger"],
}


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) → value, of one service's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(scrapes: list[dict], name: str, **labels) -> float:
    """Sum of a metric over every service and every label value not pinned by ``labels``."""
    return sum(
        v
        for scraped in scrapes
        for (n, ls), v in scraped.items()
        if n == name and all(dict(ls).get(k) == x for k, x in labels.items())
    )


async def read_all(bus: KafkaBus, role: str) -> list:
    """Every record of a topic, in log order per partition."""
    consumer = bus.consumer([role], group=None)
    await consumer.start()
    try:
        ends = await consumer.end_offsets(consumer.assignment())
        for part in consumer.assignment():
            consumer.seek(*part, 0)
        positions = dict.fromkeys(ends, 0)
        out = []
        while any(positions[p] < ends[p] for p in ends):
            for record in await consumer.poll(timeout_ms=500):
                positions[(record.role, record.partition)] = record.offset + 1
                out.append(record)
            for p in ends:
                positions[p] = max(positions[p], consumer.position_hint(*p) or 0)
        return out
    finally:
        await consumer.stop()


async def test_metrics_of_every_service_match_the_log(kafka_settings, tmp_path):
    bus = KafkaBus(kafka_settings)
    await bus.create_topics()
    procs, ports = {}, {}
    for name, args in SERVICES.items():
        extra = ["--archive-dir", str(tmp_path / "archive")] if name == "logger" else []
        procs[name], ports[name] = start_service(kafka_settings, SPEC, [*args, *extra], tmp_path / f"{name}.log")
    try:
        wait_ready(procs, ports, tmp_path)
        async with bus, Controller(bus, name="metrics-test") as ctl:
            # Trials ending for different reasons, with timeouts and rewards from several senders.
            normal = [ctl.start_trial("trialtest", seed=s) for s in range(4)]
            rewarding = ctl.start_trial(
                "trialtest", seed=9, implementations={"alice": "rewarding", "bob": "rewarding"}, max_ticks=8
            )
            silent = ctl.start_trial("trialtest", seed=5, implementations={"bob": "silent"}, max_ticks=2)
            exploding = ctl.start_trial("trialtest", environment="exploding")
            slow = ctl.start_trial("trialtest", environment="slow", max_ticks=10_000)
            tids = await asyncio.gather(*normal, rewarding, silent, exploding, slow)
            # A record nobody can use: dead-lettered once, by its owner.
            await bus.send_many([(EVENTS, b"no-such-trial", b"garbage", [(HEADER_KIND, b"observation")])])

            await wait_for(lambda: ctl.last_tick(tids[-1]) >= 3, timeout=60, what="the slow trial to tick")
            during = [scrape(p) for p in ports.values()]
            assert (
                total(during, "trialog_live_trials") >= 2
            )  # the slow trial, at least, in orchestrator and environment
            assert total(during, "trialog_ticks_total") > 0 and total(during, "trialog_loop_seconds_since_turn") < 60

            await ctl.terminate(tids[-1], reason="enough")
            for tid in tids:
                await ctl.wait_ended(tid, timeout=120)
            await ctl.send_reward(tids[0], "*", 1.0, tick=1, sender="judge")  # retroactive, after the end
            await ctl.send_reward(tids[-1], "alice", 1.0, tick=2, sender="judge")

            events = await read_all(bus, EVENTS)
            ended = Counter()
            ticks: set[tuple[str, int]] = set()
            timeouts = 0
            rewards = Counter()
            latest: dict[str, int] = {}
            over: set[str] = set()
            for r in events:
                kind = r.header(HEADER_KIND)
                if r.trial_id not in tids:
                    continue
                tick = int(r.header(HEADER_TICK) or 0)
                if kind == "observation":
                    if r.header(HEADER_REWARD) is not None:  # the environment's reward it carries: live
                        rewards["live"] += 1
                    latest[r.trial_id] = max(latest.get(r.trial_id, 0), tick)
                    if tick >= 1:
                        ticks.add((r.trial_id, tick))
                elif kind == "actor.timeout":
                    timeouts += 1
                elif kind == "trial.ended":
                    ended[bus.codec.decode(r.value, kind).reason] += 1
                    over.add(r.trial_id)
                elif kind == "reward":
                    live = r.trial_id not in over and tick >= latest.get(r.trial_id, 0)
                    rewards["live" if live else "retroactive"] += 1
            assert set(ended) >= {"environment", "error", "terminated"} and sum(ended.values()) == len(tids)
            assert timeouts >= 2 and rewards["live"] > 0 and rewards["retroactive"] == 2

            def settled():
                scrapes = [scrape(p) for p in ports.values()]
                return (
                    scrapes
                    if total(scrapes, "trialog_rewards_total") == sum(rewards.values())
                    and total(scrapes, "trialog_dead_letters_total") >= 1
                    else None
                )

            after = await wait_for(settled, timeout=30, what="the metrics to count the last rewards and dead letters")
            assert total(after, "trialog_ticks_total") == len(ticks)
            assert total(after, "trialog_tick_seconds_count") == len(ticks)
            assert total(after, "trialog_actions_timed_out_total") == timeouts
            assert {reason: total(after, "trialog_trials_ended_total", reason=reason) for reason in ended} == dict(
                ended
            )
            assert total(after, "trialog_trials_ended_total") == len(tids)
            assert {t: total(after, "trialog_rewards_total", timing=t) for t in ("live", "retroactive")} == dict(
                rewards
            )

            logged: Counter = Counter()  # (service, kind, reason category) of each letter in the topic
            for r in await read_all(bus, DEAD_LETTERS):
                letter = bus.codec.store.decode(r.value, DeadLetter.SCHEMA)
                kind = (letter["headers"].get(HEADER_KIND) or b"").decode(errors="replace")
                logged[
                    (letter["service"], kind if kind in BY_KIND else "unknown", reason_category(letter["reason"]))
                ] += 1
            counted: Counter = Counter()
            for scraped in after:
                for (name, labels), value in scraped.items():
                    if name == "trialog_dead_letters_total" and value:
                        ls = dict(labels)
                        counted[(ls["service"], ls["kind"], ls["reason"])] += int(value)
            assert counted == logged
            assert (
                sum(n for k, n in logged.items() if k[:2] == ("orchestrator", "observation")) == 1
            )  # unknown trials are the orchestrator's

        for name, port in ports.items():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=5) as response:
                assert response.status == 200, name
    finally:
        stop_services(procs.values())
