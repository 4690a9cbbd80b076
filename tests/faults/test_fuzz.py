"""The fuzz suite's short configuration, run as docs/reliability.md writes it (the long
run is documented there): malformed records of every kind fired at live service
processes on the real broker, beside honest trials."""

from __future__ import annotations

import os
import uuid

import pytest

from tests.faults.suite import run_suite

pytestmark = pytest.mark.integration
RECORDS = 120
COMMAND = ["tools/fuzz.py", "--records", str(RECORDS), "--honest", "2", "--seed", "12"]  # as in docs/reliability.md


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    if not os.environ.get("TRIALOG_BOOTSTRAP_SERVERS"):
        pytest.fail(
            "integration tests need a broker: run `export TRIALOG_BOOTSTRAP_SERVERS=$(trialog broker start)` first"
        )
    out = tmp_path_factory.mktemp("fuzz") / "fuzz.json"
    return run_suite([*COMMAND, "--topic-prefix", f"test-fuzz-{uuid.uuid4().hex[:8]}."], out, timeout=600)


def test_every_record_was_fired_and_judged(report):
    assert report["tried"] == RECORDS == sum(c["tried"] for c in report["by_category"].values())
    assert len(report["by_category"]) >= 20, "the generator covers the kinds of malformation"


def test_no_service_stops(report):
    assert report["crashed"] == 0, report["problems"]["crashed"]


def test_duplicates_of_ended_trials_change_nothing(report):
    assert not report["problems"]["ended_trials_changed"]


def test_every_malformed_record_is_dead_lettered_exactly_once(report):
    assert report["silently_dropped"] == 0 and report["lettered_more_than_once"] == 0, report["by_category"]


def test_honest_trials_replay_as_undisturbed(report):
    assert report["honest_identical"] == report["honest_trials"], report["problems"]["honest_differences"]
