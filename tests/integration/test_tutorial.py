"""docs/tutorial.md as a new user follows it, on the real broker: every line of its shell
blocks runs, in order, as written — the contract check, a campaign of agents-only trials, the
services and the gateway in the background, a trial in which a person plays ``bob`` through
the tutorial's own page in Debian's headless Chromium, the export and the script that reads
it. What the test changes, and only that: the commands run in a fresh folder holding a link
to examples/, under this test's topic prefix and broker (``TRIALOG_*`` variables), and the
services listen on free ports (``--health-port``, the gateway's ``--port`` and the
``gateway_url`` its links start with) rather than the defaults another run may hold. The
shown files and outputs are checked by tests/unit/test_tutorial.py.

Set ``TRIALOG_SCREENSHOTS=DIR`` to keep the screenshot docs/tutorial.md shows."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from tests.conftest import free_ports
from tests.gateway.browser import chromium, page_state, until
from tests.gateway.kit import people_deployment, seat_url, socket
from tests.unit.test_tutorial import how_to_run, shell_lines
from trialog.controller import join_link as link

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "tutorial" / "spec.yaml"
PAGES = ROOT / "examples" / "tutorial" / "pages"
SHOTS = os.environ.get("TRIALOG_SCREENSHOTS")
PERSON_PULLS = (3, 2, 1)  # the person's pulls, in turn, until the game ends


async def test_the_welcome_carries_the_page_the_spec_names(kafka_settings):
    """The spec says ``page: rope.js`` for ``tug``: a seat's welcome points at it (the folder has no tug.js)."""
    assert not (PAGES / "tug.js").exists()
    async with people_deployment(kafka_settings, SPEC, pages=PAGES) as (bus, ctl, base):
        tid = await ctl.start_trial("tutorial", implementations={"bob": "human"})
        async with socket(seat_url(link(base, bus.trust.keyring, tid, "bob"))) as seat:
            welcome = await seat.next("welcome")
            assert welcome["page"] == "/pages/rope.js" and welcome["environment"] == "tug"
            while (msg := await seat.next("observation", "end"))["type"] == "observation" and not msg["final"]:
                await seat.send({"type": "action", "tick": msg["tick"], "action": 0})
        assert (await ctl.wait_ended(tid, timeout=60)).reason == "environment"  # resting loses


def _environment(kafka_settings, gateway_port: int) -> dict[str, str]:
    # The tutorial's settings only, but the local broker's location kept: its `trialog broker
    # start` must find the broker this suite runs on (CI keeps one in a data dir of its own).
    kept = ("TRIALOG_BROKER_DIR", "TRIALOG_BROKER_PORT", "TRIALOG_BROKER_CONTROLLER_PORT", "TRIALOG_KAFKA_CACHE",
            "TRIALOG_KAFKA_VERSION")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIALOG_") or k in kept}
    return env | {
        "TRIALOG_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "TRIALOG_TOPIC_PREFIX": kafka_settings.topic_prefix,
        "TRIALOG_PARTITIONS": str(kafka_settings.partitions),
        "TRIALOG_GATEWAY_URL": f"http://127.0.0.1:{gateway_port}",
    }


def _argv(command: str) -> list[str]:
    """A documented command's words, with this interpreter for ``trialog`` and ``python``."""
    words = shlex.split(command)
    if words[0] == "trialog":
        return [sys.executable, "-m", "trialog.cli", *words[1:]]
    assert words[0] == "python", command
    return [sys.executable, *words[1:]]


def _ready(port: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"a service on health port {port} was not ready within {timeout} s")
        time.sleep(0.2)


def _turn(state: dict) -> dict | None:
    """The page's state once a pull is awaited (or the trial ended); None before."""
    return state if state.get("ended") or state.get("waiting") is not None else None


def _play_tug(url: str) -> dict:
    """A person opens the link and pulls PERSON_PULLS in turn until the game is over."""
    pulled = []
    with chromium() as driver:
        driver.get(url)
        until(lambda: driver.find_elements(By.ID, "tug-rope"), timeout=60, what="the tutorial's page (rope.js)")
        while not page_state(driver).get("ended"):
            state = until(lambda: _turn(page_state(driver)), timeout=60, what="a tick to pull in, or the end")
            if state.get("ended"):
                break
            tick = state["waiting"]
            until(lambda: driver.find_element(By.CSS_SELECTOR, 'button[data-pull="0"]').is_enabled(), what="buttons")
            if SHOTS and tick == 3:
                driver.save_screenshot(str(Path(SHOTS) / "tutorial-rope.png"))
            pull = PERSON_PULLS[len(pulled) % len(PERSON_PULLS)]
            driver.find_element(By.CSS_SELECTOR, f'button[data-pull="{pull}"]').click()
            pulled.append((tick, pull))
            until(lambda t=tick: page_state(driver).get("waiting") != t, timeout=60, what="the next tick")
        until(lambda: "game over" in driver.find_element(By.ID, "tug-status").text, what="the verdict")
        return {
            "pulled": pulled,
            "status": driver.find_element(By.ID, "tug-status").text,
            "log": driver.find_element(By.ID, "log").text,
            **page_state(driver),
        }


def _watch(url: str) -> str:
    """The watch page of the ended trial, drawn by rope.js's watcher: the rope as it ended."""
    with chromium() as driver:
        driver.get(url)
        rope = until(lambda: driver.find_elements(By.ID, "tug-rope"), timeout=60, what="rope.js on the watch page")
        until(lambda: "●" in rope[0].text, what="the knot drawn from the log's views")
        return rope[0].text


def _person(argv, env, cwd, timeout: float = 120) -> tuple[dict, str]:
    """``trialog trial start … --wait``: read the join link it prints, play it, then its end."""
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            lines.append(line)
            if found := re.match(r"bob: (http://\S+/play\?token=\S+)", line):
                page = _play_tug(found[1])
                break
        else:
            raise AssertionError(f"no join link for bob was printed:\n{''.join(lines)}")
        lines += proc.stdout.readlines()
        assert proc.wait() == 0, "".join(lines)
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
    return page, "".join(lines)


def test_the_tutorial_runs_as_written(kafka_settings, tmp_path):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    gateway_port = free_ports(1)[0]
    env = _environment(kafka_settings, gateway_port)
    background: list[subprocess.Popen] = []
    outputs: dict[str, str] = {}
    page = watched = None
    try:
        for line in shell_lines():
            kind = how_to_run(line)
            if kind == "set":
                name, _, value = line.removeprefix("export ").partition("=")
                env[name] = value
            elif kind == "capture":
                name, _, command = line.removeprefix("export ").partition("=")
                out = subprocess.run(
                    _argv(command[2:-1]), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
                )
                assert out.returncode == 0, out.stderr
                value = out.stdout.strip().splitlines()[-1]
                if name == "TRIALOG_BOOTSTRAP_SERVERS":  # the test's broker stays this test's
                    assert re.fullmatch(r"[\w.-]+:\d+(,[\w.-]+:\d+)*", value), value
                else:
                    env[name] = value
            elif kind == "background":
                argv = _argv(line.removesuffix(" &"))
                assert argv[3] == "serve", line
                health = free_ports(1)[0]
                argv += ["--health-port", str(health)] + (["--port", str(gateway_port)] if argv[4] == "gateway" else [])
                log = open(tmp_path / f"{argv[4]}.log", "w")  # noqa: SIM115 (closed with the process)
                background.append(
                    subprocess.Popen(
                        argv, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
                _ready(health)
            elif kind == "person":
                page, outputs[line] = _person(_argv(line), env, tmp_path)
                trial_id = outputs[line].split()[0]
                watched = _watch(f"{env['TRIALOG_GATEWAY_URL']}/watch/{trial_id}")
            else:
                out = subprocess.run(_argv(line), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
                assert out.returncode == 0, f"{line}\n{out.stdout}\n{out.stderr}"
                outputs[line] = out.stdout + out.stderr
    finally:
        for proc in background:
            proc.terminate()
        for proc in background:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()

    # The campaign: 20 trials of the good sport against random.
    run = next(out for line, out in outputs.items() if line.startswith("trialog run "))
    summary = re.search(r"sport \+ random\s+20\s+[\d.]+\s+(-?[\d.]+)\s+(-?[\d.]+)", run)
    assert "20/20 done" in run and summary, run
    assert float(summary[1]) > 0, f"the good sport wins more games than it loses, as docs/tutorial.md says:\n{run}"
    # The person played bob through rope.js, named by the spec, and the trial ended.
    assert page is not None and page["pulled"] and page["status"].startswith("game over")
    person = next(out for line, out in outputs.items() if line.startswith("trialog trial start "))
    assert watched.startswith("alice") and watched.endswith("bob")  # drawn from the first player's side
    assert re.search(r"ended: (environment|max_ticks)", person), person
    # The export has exactly the person's pulls, in order, and the script prints them.
    pulls = next(out for line, out in outputs.items() if line.startswith("python "))
    printed = [(int(t), int(p)) for t, p in re.findall(r"tick +(\d+): knot [+-]\d+, stamina \d+, pulled (\d+)", pulls)]
    assert printed == page["pulled"], pulls
    assert "bob played by human" in pulls and pulls.count("trial ") == 1
    cheers = pulls.count("cheered by alice")
    assert cheers == page["log"].count("good pull!")  # each cheer is a reward and a message
