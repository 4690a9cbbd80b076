"""The generic page's form for every kind of action it supports, in headless Chromium (no
broker: generic.js is handed a trial and an ``act`` that records what it sends): a record of
a tensor with a Box space, a float, a bounded integer, an enum and a boolean. What it sends
is what was entered, and the action schema (as the gateway checks it) takes it."""

from __future__ import annotations

import contextlib
import functools
import json
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
from selenium.webdriver.common.by import By

from tests.gateway.browser import chromium, until
from trialog.bus.memory import MemoryBus
from trialog.services.gateway.routes import STATIC
from trialog.settings import Settings

pytestmark = pytest.mark.integration

TENSOR = {
    "type": "record",
    "name": "trialog.Tensor",
    "fields": [
        {"name": "dtype", "type": "string"},
        {"name": "shape", "type": {"type": "array", "items": "long"}},
        {"name": "data", "type": "bytes"},
    ],
}
SCHEMA = {
    "type": "record",
    "name": "form.Act",
    "fields": [
        {"name": "pos", "type": TENSOR},
        {"name": "weight", "type": "double"},
        {"name": "count", "type": {"type": "long", "trialog.space": {"type": "Discrete", "n": 5, "start": 0}}},
        {"name": "mode", "type": {"type": "enum", "name": "form.Mode", "symbols": ["SLOW", "FAST"]}},
        {"name": "flag", "type": "boolean"},
    ],
    "trialog.space": {
        "type": "Dict",
        "fields": [
            {
                "name": "pos",
                "key": "pos",
                "space": {"type": "Box", "shape": [2], "dtype": "float32", "low": -1.0, "high": 1.0},
            }
        ],
    },  # fmt: skip
}
TRIAL = {"actor": "ada", "actors": [{"name": "ada", "class": "mover"}], "classes": {"mover": {"action_schema": SCHEMA}}}


@contextlib.contextmanager
def static_server():
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(STATIC / "js" / "games"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def fill(driver, field: str, value: str) -> None:
    box = driver.find_element(By.CSS_SELECTOR, f'input[data-field="{field}"]')
    box.clear()
    box.send_keys(value)


def test_the_generic_form_sends_what_was_entered():
    with static_server() as base, chromium() as driver:
        driver.get(f"{base}/")  # any page of the origin, to import the module from
        driver.execute_script(
            "window.sent = []; import('/generic.js').then((m) => { document.body.innerHTML = '<div id=game></div>';"
            " m.create(document.getElementById('game'), arguments[0], (v) => window.sent.push(v)); });",
            TRIAL,
        )
        until(lambda: driver.find_elements(By.ID, "generic-send"), what="the form")
        pos = driver.find_elements(By.CSS_SELECTOR, ".generic-row input")
        assert [(p.get_attribute("min"), p.get_attribute("max"), p.get_attribute("step")) for p in pos] == [
            ("-1", "1", "any")
        ] * 2
        fill(driver, "pos[0]", "0.5")
        fill(driver, "pos[1]", "3")  # out of the Box: not sent
        fill(driver, "weight", "2.25")
        fill(driver, "count", "4")
        driver.find_element(By.CSS_SELECTOR, 'select[data-field="mode"] option[value="FAST"]').click()
        driver.find_element(By.CSS_SELECTOR, 'input[data-field="flag"]').click()
        driver.find_element(By.ID, "generic-send").click()
        until(lambda: "not sent" in driver.find_element(By.ID, "generic-observation").text, what="the refusal")
        assert driver.execute_script("return window.sent") == []
        fill(driver, "pos[1]", "-0.25")
        driver.find_element(By.ID, "generic-send").click()
        sent = until(lambda: driver.execute_script("return window.sent"), what="the action")
    assert sent == [{"pos": [0.5, -0.25], "weight": 2.25, "count": 4, "mode": "FAST", "flag": True}]
    schema = MemoryBus(Settings()).store.register(json.dumps(SCHEMA))
    schema.encode(sent[0])  # the gateway's check: the class's action schema takes it
