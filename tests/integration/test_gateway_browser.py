"""The pages in a real headless Chromium, on the real broker: a scripted person takes
a seat from the lobby and plays a whole real-time Overcooked trial beside the
planner (reloading the page mid-trial), then judges a past tick on the watch page;
a bad link is refused on the page.

Set ``TRIALOG_SCREENSHOTS=DIR`` to keep a screenshot of each page (docs/humans.md).
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from tests.conftest import free_ports
from tests.gateway.browser import chromium, page_state, until
from tests.gateway.kit import people_deployment
from tests.integration.test_trials import read_trial
from trialog.datalog.replay import read_trial as read_fold
from trialog.datalog.replay import trial_records
from trialog.protocol.events import Action, ActorTimeout, View

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SHOTS = os.environ.get("TRIALOG_SCREENSHOTS")
TICKS = 60


def shot(driver, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(SHOTS) / f"{name}.png"))


def take_seat_and_play(base: str, trial_id: str) -> dict:
    """The scripted person: lobby → seat → keys until the end, with a reload mid-trial."""
    rng = random.Random(7)
    keys = [Keys.ARROW_UP, Keys.ARROW_DOWN, Keys.ARROW_LEFT, Keys.ARROW_RIGHT, Keys.SPACE]
    with chromium() as driver:
        driver.get(f"{base}/")
        button = f'tr[data-trial="{trial_id}"] button.take-seat'
        until(lambda: driver.find_elements(By.CSS_SELECTOR, button), what="the trial's seat in the lobby")
        shot(driver, "lobby")
        until(lambda: driver.find_element(By.CSS_SELECTOR, button).click() or True, what="clicking the seat")
        until(lambda: page_state(driver).get("tick") is not None, what="the first observation")
        reloaded_at = None
        give_up = time.monotonic() + 300
        while not page_state(driver).get("ended") and time.monotonic() < give_up:
            tick = page_state(driver).get("tick") or 0
            if reloaded_at is None and tick >= TICKS // 3:
                shot(driver, "play-overcooked")
                driver.refresh()  # a reload mid-trial: the seat resumes from the log
                reloaded_at = tick
                until(lambda: page_state(driver).get("tick") is not None, what="the seat to resume after a reload")
            driver.find_element(By.TAG_NAME, "body").send_keys(rng.choice(keys))
            time.sleep(rng.uniform(0.05, 0.3))
        state = page_state(driver)
        state["reloaded_at"] = reloaded_at
        state["status"] = driver.find_element(By.ID, "status").text
        return state


def judge_past_tick(base: str, trial_id: str, tick: int) -> dict:
    with chromium() as driver:
        driver.get(f"{base}/watch/{trial_id}")
        until(
            lambda: page_state(driver).get("live") and page_state(driver).get("tick", 0) > tick,
            what="the trial's history",
        )
        driver.execute_script(
            "const t = document.querySelector('#timeline'); t.value = arguments[0]; "
            "t.dispatchEvent(new Event('input'));",
            tick,
        )
        driver.find_element(By.ID, "judge-name").send_keys("ada")
        driver.find_element(By.CSS_SELECTOR, "#judge-actor option[value=cook_b]").click()
        driver.execute_script(
            "const c = document.querySelector('#judge-confidence'); c.value = 0.8; c.dispatchEvent(new Event('input'));"
        )
        driver.find_element(By.ID, "thumbs-up").click()
        until(lambda: page_state(driver).get("rewarded"), what="the judgement to be accepted")
        shot(driver, "watch-judge")
        return page_state(driver)


def refused_page(url: str) -> str:
    with chromium() as driver:
        driver.get(url)
        reason = until(lambda: page_state(driver).get("refused"), what="the refusal")
        shot(driver, "refused")
        return reason


@pytest.fixture
async def overcooked(kafka_settings):
    async with people_deployment(kafka_settings, EXAMPLES / "overcooked" / "people.yaml") as running:
        yield running


async def test_a_person_plays_overcooked_with_the_planner_in_chromium(overcooked):
    bus, ctl, base = overcooked
    tid = await ctl.start_trial("overcooked-people", max_ticks=TICKS)
    page = await asyncio.to_thread(take_seat_and_play, base, tid)
    ended = await ctl.wait_ended(tid, timeout=60)
    assert ended.reason == "max_ticks" and page["ended"] == "max_ticks" and "trial over" in page["status"]
    events = await read_trial(bus, tid)

    # Every tick, the person's move is in the log — their action through the gateway,
    # or the logged timeout that made it the default action.
    acted = {e.tick for e in events if isinstance(e, Action) and e.actor == "cook_a"}
    timed_out = {e.tick for e in events if isinstance(e, ActorTimeout) and e.actor == "cook_a"}
    assert acted and acted | timed_out == set(range(TICKS))
    assert any(t > page["reloaded_at"] for t in acted), "the person kept acting after the reload"
    planner = {e.tick for e in events if isinstance(e, Action | ActorTimeout) and e.actor == "cook_b"}
    assert planner == set(range(TICKS))

    # Real time: one step per 150 ms interval, and a drawable view with every tick.
    assert {e.tick for e in events if isinstance(e, View)} == set(range(TICKS + 1))
    written = {
        int(r.header("tick")): r.timestamp_ms async for r in trial_records(bus, tid) if r.header("kind") == "view"
    }
    assert written[TICKS] - written[1] >= (TICKS - 1) * 150 * 0.95

    # The page's round trip (action sent -> next observation drawn) stays under a tick.
    assert page["latencies"] and sorted(page["latencies"])[len(page["latencies"]) // 2] < 1000

    # Then a judge rewards the planner for an earlier tick, and the datalog joins it there.
    judged = await asyncio.to_thread(judge_past_tick, base, tid, 5)
    assert judged["rewarded"][0]["tick"] == 5
    for _ in range(50):
        sample = (await read_fold(bus, tid)).sample(5, "cook_b")
        sources = [s for s in sample.reward_sources if s.sender == "person:ada"]
        if sources:
            break
        await asyncio.sleep(0.2)
    assert [(s.value, s.confidence) for s in sources] == [(1.0, 0.8)]


async def test_a_bad_link_is_refused_on_the_page(overcooked):
    bus, ctl, base = overcooked
    reason = await asyncio.to_thread(refused_page, f"{base}/play?token=forged")
    assert "damaged" in reason


def test_trialog_demo_humans_prints_a_link_a_person_can_play(kafka_settings):
    """`trialog demo --humans` (README): the link it prints opens a seat beside the planner."""
    port = free_ports(1)[0]
    env = {**os.environ, "TRIALOG_TOPIC_PREFIX": kafka_settings.topic_prefix, "TRIALOG_LOG_FORMAT": "json"}
    demo = subprocess.Popen(
        [sys.executable, "-m", "trialog.cli", "demo", "--humans", "--gateway-port", str(port), "--max-ticks", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    try:
        line = ""
        while "open http" not in line:
            line = demo.stdout.readline()
            assert line, "trialog demo --humans ended without printing a link"
        url = line.split("open ", 1)[1].strip()
        assert url.startswith(f"http://127.0.0.1:{port}/play?token=")
        with chromium() as driver:
            driver.get(url)
            until(lambda: page_state(driver).get("tick") is not None, what="the first observation")
            give_up = time.monotonic() + 300
            while not page_state(driver).get("ended") and time.monotonic() < give_up:
                driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ARROW_LEFT)
                time.sleep(0.2)
            assert page_state(driver).get("ended") == "max_ticks", "the page never showed the end"
            assert page_state(driver)["actions"] > 0
        out, _ = demo.communicate(timeout=60)
        assert demo.returncode == 0 and "ended: max_ticks at tick 30" in out
    finally:
        if demo.poll() is None:
            demo.kill()


def play_rps(url: str) -> dict:
    """A person clicking rock, paper, scissors in turn until the game is over."""
    with chromium() as driver:
        driver.get(url)
        until(lambda: page_state(driver).get("tick") is not None, what="the first round")
        moves = ["ROCK", "PAPER", "SCISSORS"]
        clicks = 0
        give_up = time.monotonic() + 300
        while not page_state(driver).get("ended") and time.monotonic() < give_up:
            buttons = [b for b in driver.find_elements(By.CSS_SELECTOR, "button[data-move]") if b.is_enabled()]
            if buttons:
                driver.find_element(By.CSS_SELECTOR, f"button[data-move={moves[clicks % 3]}]").click()
                clicks += 1
                if clicks == 4:
                    shot(driver, "play-rps")
            time.sleep(0.05)
        return {**page_state(driver), "clicks": clicks}


async def test_a_person_plays_rock_paper_scissors_and_exports_the_demonstration(kafka_settings, tmp_path):
    async with people_deployment(kafka_settings, EXAMPLES / "rps" / "spec.yaml") as (bus, ctl, base):
        tid = await ctl.start_trial("rps", implementations={"bob": "human"}, max_ticks=12)
        (url,) = ctl.join_links(tid, ["bob"]).values()
        page = await asyncio.to_thread(play_rps, url.replace("http://127.0.0.1:8000", base))
        await ctl.wait_ended(tid, timeout=30)
        events = await read_trial(bus, tid)
    bob = [e for e in events if isinstance(e, Action) and e.actor == "bob"]
    assert page["ended"] and len(bob) == page["actions"] > 0  # every move the page sent is in the log
    # On a loaded machine a click can come after the 5 s response timeout: the default was played.
    late = {e.tick for e in events if isinstance(e, ActorTimeout) and e.actor == "bob"}

    # The person's moves are demonstrations: `trialog export --implementation human` (docs/humans.md).
    out = tmp_path / "people.parquet"
    env = {
        **os.environ,
        "TRIALOG_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "TRIALOG_TOPIC_PREFIX": kafka_settings.topic_prefix,
    }
    done = subprocess.run(
        [sys.executable, "-m", "trialog.cli", "export", "--implementation", "human", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    import pyarrow.parquet as pq

    rows = pq.read_table(out).to_pylist()
    assert {r["actor"] for r in rows} == {"bob"} and {r["implementation"] for r in rows} == {"human"}
    played = sorted((r["tick"], r["action"]) for r in rows if r["action"] is not None and not r["timed_out"])
    assert [t for t, _ in played] == [a.tick for a in bob if a.tick not in late]
