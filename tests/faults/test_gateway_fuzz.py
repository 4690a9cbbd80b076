"""The gateway fuzz suite's short mode, run as docs/reliability.md writes it (the long run
is documented there): attacks on one web gateway process — HTTP, handshakes, messages on
seats and watch sockets, crowds of sockets, a flood — beside an honest person playing in
real time, with services and gateway as processes on the real broker."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from tests.faults.suite import run_suite
from tools.gateway_fuzz import HONEST_LATE_SHARE

pytestmark = pytest.mark.integration
COMMAND = ["tools/gateway_fuzz.py", "--short"]  # as in docs/reliability.md


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    if not os.environ.get("TRIALOG_BOOTSTRAP_SERVERS"):
        pytest.fail(
            "integration tests need a broker: run `export TRIALOG_BOOTSTRAP_SERVERS=$(trialog broker start)` first"
        )
    folder = tmp_path_factory.mktemp("gateway-fuzz")
    return run_suite(
        [*COMMAND, "--topic-prefix", f"test-gwfuzz-{uuid.uuid4().hex[:8]}.", "--log-dir", str(folder / "logs")],
        folder / "gateway-fuzz.json",
        timeout=600,
    )


def shown(value) -> str:
    """A failure's evidence in full (pytest would shorten a dict)."""
    return "\n" + json.dumps(value, indent=1, default=str)


def failing(report: dict, verdict: str) -> dict:
    """Per kind with attempts of ``verdict``: how many, and what was seen (the evidence)."""
    return {
        name: {verdict: k[verdict], "answers": k["answers"], "evidence": k["evidence"]}
        for name, k in report["kinds"].items()
        if k[verdict]
    }


def test_every_kind_was_fired_and_judged(report):
    assert report["tried"] == sum(k["tried"] for k in report["kinds"].values()) > 0
    fired = {name for name, k in report["kinds"].items() if k["tried"]}
    expected = {
        "http: POST /api/seat, running trial's seat",
        "http: 20 MB POST /api/seat",
        "http: 20 MB POST /no/such/page",
        "http: wrong method",
        "seat socket: garbage token",
        "seat socket: takeover while the holder is connected",
        "crowd: 300 sockets to one held seat",
        "crowd: 300 watch sockets to one trial",
        "seat: JSON nested 30,000 deep",
        "seat: three rewards of 1e308 at one tick",
        "seat: frame over the size limit",
        "seat: message to a nonexistent receiver",
        "watch: reward with a bad judge name",
    }
    assert expected <= fired, f"kinds not fired: {sorted(expected - fired)}"
    assert len(fired) >= 60, "the suite covers the kinds of attack"
    assert any(name.startswith("flood: ") for name in fired)


def test_every_attempt_is_answered(report):
    assert report["unanswered"] == 0, shown(failing(report, "unanswered"))


def test_nothing_crashes(report):
    assert report["crashed"] == 0, shown(
        {
            "kinds": failing(report, "crashed"),
            "gateway tracebacks": report["gateway_tracebacks"],
            "exited": report["exited"],
        }
    )


def test_nothing_rule_breaking_is_applied(report):
    assert report["applied"] == 0, shown(failing(report, "applied"))


def test_the_flood_is_bounded_by_the_rate_limit(report):
    flood = report["flood"]
    assert flood["records"] <= flood["bound"], shown(flood)


def test_the_honest_seat_plays_undisturbed(report):
    honest = {k: v for k, v in report["honest"].items() if k != "trial"}
    assert honest["ticks"] > 0 and honest["timeouts"] <= HONEST_LATE_SHARE * honest["ticks"], shown(honest)
    assert not honest["drops"] and not honest["errors"], shown(honest)


def test_memory_is_measured(report):
    rss = report["rss_mb"]
    assert 0 < rss["before"] <= rss["peak"], rss
