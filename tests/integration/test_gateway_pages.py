"""Pages for environments without a shipped one, in headless Chromium on the real broker: a
person bids (an action that is a record of a bounded number and a boolean) through the
generic page's form, then through the operator's own page served from a pages folder
(``trialog serve gateway --pages DIR``); the log has exactly what they entered."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from tests.gateway.browser import chromium, page_state, until
from tests.gateway.kit import people_deployment
from tests.integration.test_trials import read_trial
from trialog.controller import join_link as link
from trialog.protocol.events import Action
from trialog.spec import load_spec

pytestmark = pytest.mark.integration
SPEC = Path(__file__).with_name("gateway_pages.yaml")

# The operator's page for the environment `bids`: what a page module exports (docs/humans.md).
OWN_PAGE = """
export function create(root, trial, act) {
  root.innerHTML = `<p id="own-page">${trial.environment}: total <b id="total">?</b></p>
    <button id="bid-five">bid 5</button>`;
  root.querySelector("#bid-five").addEventListener("click", () => act({ amount: 5, confirm: true }));
  return {
    observation(msg) {
      root.querySelector("#total").textContent = msg.observation.total;
    },
  };
}
"""


async def bids_in_log(bus, tid) -> list[tuple[int, dict]]:
    """The person's actions as the log has them, decoded with the spec's action schema."""
    schema = bus.store.register(load_spec(SPEC, bus.store).actor_classes["bidder"].action_schema)
    events = await read_trial(bus, tid)
    return [(e.tick, bus.store.decode(e.payload, schema)) for e in events if isinstance(e, Action) and e.actor == "ada"]


def waiting_for(driver, tick: int) -> None:
    until(lambda: page_state(driver).get("waiting") == tick, timeout=60, what=f"the observation of tick {tick}")


def bid(driver, amount: str, confirm: bool) -> None:
    box = driver.find_element(By.CSS_SELECTOR, 'input[data-field="amount"]')
    box.clear()
    box.send_keys(amount)
    check = driver.find_element(By.CSS_SELECTOR, 'input[data-field="confirm"]')
    if check.is_selected() != confirm:
        check.click()
    driver.find_element(By.ID, "generic-send").click()


def play_generic(url: str) -> dict:
    with chromium() as driver:
        driver.get(url)
        waiting_for(driver, 0)
        amount = driver.find_element(By.CSS_SELECTOR, 'input[data-field="amount"]')
        bounds = (amount.get_attribute("min"), amount.get_attribute("max"), amount.get_attribute("step"))
        assert driver.find_element(By.CSS_SELECTOR, 'input[data-field="confirm"]').get_attribute("type") == "checkbox"
        bid(driver, "42", True)  # out of the space's bounds: the page says so and sends nothing
        until(lambda: "not sent" in driver.find_element(By.ID, "generic-observation").text, what="the bounds refusal")
        assert page_state(driver)["actions"] == 0
        bid(driver, "7", True)
        waiting_for(driver, 1)
        bid(driver, "3", False)
        until(lambda: page_state(driver).get("ended"), timeout=60, what="the end of the trial")
        return {"bounds": bounds, **page_state(driver)}


def play_own_page(url: str) -> dict:
    with chromium() as driver:
        driver.get(url)
        until(lambda: driver.find_elements(By.ID, "own-page"), timeout=60, what="the operator's page")
        waiting_for(driver, 0)
        driver.find_element(By.ID, "bid-five").click()
        waiting_for(driver, 1)
        until(lambda: driver.find_element(By.ID, "total").text == "5", what="the total drawn by the page")
        driver.find_element(By.ID, "bid-five").click()
        until(lambda: page_state(driver).get("ended"), timeout=60, what="the end of the trial")
        return {"text": driver.find_element(By.ID, "own-page").text, **page_state(driver)}


async def test_the_generic_page_builds_a_form_for_a_record_action(kafka_settings):
    async with people_deployment(kafka_settings, SPEC) as (bus, ctl, base):
        tid = await ctl.start_trial("gw-pages")
        page = await asyncio.to_thread(play_generic, link(base, bus.trust.keyring, tid, "ada"))
        ended = await ctl.wait_ended(tid, timeout=60)
        assert ended.reason == "max_ticks" and page["ended"] == "max_ticks"
        assert page["bounds"] == ("1", "10", "1") and page["actions"] == 2
        assert await bids_in_log(bus, tid) == [
            (0, {"amount": 7, "confirm": True}),
            (1, {"amount": 3, "confirm": False}),
        ]


async def test_the_operators_own_page_is_served_from_the_pages_folder(kafka_settings, tmp_path):
    (tmp_path / "bids.js").write_text(OWN_PAGE)
    async with people_deployment(kafka_settings, SPEC, pages=tmp_path) as (bus, ctl, base):
        tid = await ctl.start_trial("gw-pages")
        page = await asyncio.to_thread(play_own_page, link(base, bus.trust.keyring, tid, "ada"))
        ended = await ctl.wait_ended(tid, timeout=60)
        assert ended.reason == "max_ticks" and page["text"].startswith("bids: total")
        assert await bids_in_log(bus, tid) == [(0, {"amount": 5, "confirm": True}), (1, {"amount": 5, "confirm": True})]
