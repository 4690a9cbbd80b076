"""The chaos suite's short configuration, run as docs/reliability.md writes it (the long
run is documented there): every service SIGKILLed while it owns the trials, then the
broker, on a broker of its own; every trial must replay as undisturbed and the archive
must hold each (trial, tick, actor) exactly once."""

from __future__ import annotations

import pytest

from tests.conftest import free_ports
from tests.faults.suite import run_suite

pytestmark = pytest.mark.integration
COMMAND = ["tools/chaos.py", "--trials", "2", "--rounds", "1", "--ticks", "800"]  # as in docs/reliability.md


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("chaos")
    port = free_ports(1)[0]  # its controller listens on port+1: checked free below, or the broker says so
    args = ["--port", str(port), "--data-dir", str(work / "broker"), "--log-dir", str(work / "run")]
    return run_suite([*COMMAND, *args], work / "chaos.json", timeout=900)


def test_every_service_and_the_broker_were_killed_mid_campaign(report):
    assert report["kills"] == ["environment", "actors", "broker", "orchestrator", "logger"]


def test_every_trial_replays_as_undisturbed(report):
    assert report["identical"] == report["trials"] == 2, report["differences"]


def test_the_archive_holds_each_sample_exactly_once(report):
    assert (report["lost"], report["duplicated"]) == (0, 0), report["differences"]
