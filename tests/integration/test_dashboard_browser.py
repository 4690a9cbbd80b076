"""The live dashboard in a real headless Chromium, on the real broker: a campaign runs
with the analytics jobs beside it, and the page shows the running trials, ticks/s,
returns per pairing updating as trials end, and a dead letter.

Set ``TRIALOG_SCREENSHOTS=DIR`` to keep the screenshot (docs/analytics.md shows it).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.gateway.browser import chromium, page_state, until
from tests.gateway.kit import gateway
from trialog.bus.kafka import KafkaBus
from trialog.controller import Controller, run_campaign
from trialog.protocol.events import HEADER_KIND
from trialog.protocol.topics import EVENTS
from trialog.spec import load_spec
from trialog.tools.campaign import start_service, stop_services, wait_ready

pytestmark = pytest.mark.integration
SPEC = Path(__file__).resolve().parent / "trialtest.yaml"
SHOTS = os.environ.get("TRIALOG_SCREENSHOTS")
PAIRINGS = [
    {"alice": "random", "bob": "counter"},
    {"alice": "counter", "bob": "random"},
    {"alice": "random", "bob": "random"},
]
TRIALS = 24


def watch_dashboard(base: str, campaign_done) -> dict:
    with chromium(width=1100, height=1250) as driver:
        driver.get(f"{base}/dashboard")
        live = until(
            lambda: (s := page_state(driver)).get("running", 0) > 0 and s.get("ticks_per_s", 0) > 0 and s,
            timeout=60,
            what="running trials and ticks/s",
        )
        first = until(
            lambda: (s := page_state(driver)).get("pairings", 0) >= 2 and s,
            timeout=90,
            what="returns per pairing from the analytics jobs",
        )
        # Live: more trial returns appear on the plot without a reload.
        later = until(
            lambda: (s := page_state(driver)).get("points", 0) > first["points"] and s,
            timeout=60,
            what="the plot to grow",
        )
        until(lambda: page_state(driver).get("dead_letters", 0) >= 1, timeout=30, what="the dead letter")
        until(lambda: campaign_done() or None, timeout=120, what="the campaign's end")
        final = until(
            lambda: (
                (s := page_state(driver)).get("points") == TRIALS
                and s.get("pairing_trials") == TRIALS
                and s.get("running") == 0
                and s
            ),
            timeout=60,
            what="every trial on the plot and in the table",
        )
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(Path(SHOTS) / "dashboard.png"))
        rows = driver.execute_script(
            "return [...document.querySelectorAll('#pairings tbody tr')].map(r => r.cells[0].textContent)"
        )
        letters = driver.execute_script("return document.querySelector('#dead-letters tbody').textContent")
        return {"live": live, "first": first, "later": later, "final": final, "rows": rows, "letters": letters}


async def test_the_dashboard_shows_a_live_campaign_in_chromium(kafka_settings, tmp_path):
    bus = KafkaBus(kafka_settings)
    await bus.create_topics()
    procs, ports = {}, {}
    for name, args in {
        "orchestrator": ["orchestrator"],
        "environment": ["environment"],
        "actors": ["actors"],
        "analytics": ["analytics", "--state-dir", str(tmp_path / "state"), "--window", "5"],
    }.items():
        procs[name], ports[name] = start_service(kafka_settings, str(SPEC), args, tmp_path / f"{name}.log")
    try:
        wait_ready(procs, ports, tmp_path)
        spec = load_spec(SPEC, bus.store)
        async with (
            bus,
            Controller(bus, name="dashboard-test") as ctl,
            gateway(KafkaBus(kafka_settings, bus.store), [spec]) as base,
        ):
            await bus.send_many([(EVENTS, b"ghost-trial", b"garbage", [(HEADER_KIND, b"observation")])])
            campaign = asyncio.create_task(
                run_campaign(
                    ctl,
                    "trialtest",
                    TRIALS,
                    3,
                    overrides=lambda i: {
                        "environment": "slow",
                        "max_ticks": 20 + i % 7,
                        "seed": i,
                        "implementations": PAIRINGS[i % 3],
                    },
                )
            )
            page = await asyncio.to_thread(watch_dashboard, base, campaign.done)
            result = await campaign
        assert not any(o.error for o in result.outcomes)
        assert page["final"]["ended"] >= TRIALS and page["final"]["analytics"] and page["final"]["actor"] == "alice"
        assert sorted(page["rows"]) == sorted(" + ".join(p.values()) for p in PAIRINGS)
        assert "ghost-trial" in page["letters"]
    finally:
        stop_services(procs.values())
