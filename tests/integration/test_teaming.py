"""`trialog teaming` end to end on the real broker: the services and a gateway started by the
command (--local), Overcooked with people (examples/overcooked/people.yaml) in three modes,
scripted stand-ins playing the people's seats through the gateway's seat sockets; the table,
the CSV, the JSON and the plot against what the datalog holds."""

from __future__ import annotations

import asyncio
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_ports
from trialog.bus.kafka import KafkaBus
from trialog.datalog.replay import read_trials
from trialog.tools.plot import returns_from_log

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "overcooked" / "people.yaml"
TRIALS, TICKS = 2, 20


def test_teaming_compares_three_teams_from_the_log(kafka_settings, tmp_path):
    port = free_ports(1)[0]
    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "trialog.cli", "teaming", str(SPEC), "--agent", "planner", "--person-impl", "human",
        "--trials", str(TRIALS), "--max-ticks", str(TICKS), "--scripted", "--local", "--gateway-port", str(port),
        "--seed", "3", "--out", str(out),
        "--bootstrap-servers", kafka_settings.bootstrap_servers, "--topic-prefix", kafka_settings.topic_prefix,
        "--partitions", "4",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]

    # The table: one row per mode, in order, N trials each.
    lines = done.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["mode", "trials"])
    rows = [line.split() for line in lines[head + 1 : head + 4]]
    assert [(r[0], r[1]) for r in rows] == [("AI-only", "2"), ("human-only", "2"), ("human+AI", "2")]
    assert f"plot: {out / 'teaming.png'}" in done.stdout
    assert (out / "teaming.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    with open(out / "teaming.csv") as f:
        trials = list(csv.DictReader(f))
    assert [(t["mode"], t["pairing"]) for t in trials] == [
        ("ai", "planner + planner"), ("ai", "planner + planner"),
        ("human", "human + human"), ("human", "human + human"),
        ("mixed", "human + planner"), ("mixed", "human + planner"),
    ]  # fmt: skip
    assert all(t["reason"] == "max_ticks" and t["ticks"] == str(TICKS) for t in trials)
    doc = json.loads((out / "teaming.json").read_text())

    async def from_the_log():
        bus = KafkaBus(kafka_settings)
        wanted = {t["trial_id"] for t in trials}
        returns = {r.trial_id: r for r in await returns_from_log(bus)}
        played: dict[str, int] = {}
        async for fold in read_trials(bus, lambda record: record.trial_id in wanted):
            played[fold.trial_id] = sum(
                1
                for s in fold.samples()
                if s.implementation == "human" and not s.timed_out and s.action_avro is not None
            )
        await bus.stop()
        return returns, played

    returns, played = asyncio.run(from_the_log())
    assert {t["trial_id"] for t in trials} <= set(returns)
    for t, d in zip(trials, doc["trials"], strict=True):
        assert float(t["return"]) == pytest.approx(returns[t["trial_id"]].total)
        assert d["returns"] == pytest.approx(dict(returns[t["trial_id"]].returns))
        # The people's seats were played by the stand-ins through the gateway: their actions are in the log.
        people = {"ai": 0, "human": 2, "mixed": 1}[t["mode"]]
        assert len(d["stand_in_actions"]) == people
        if people:
            assert played[t["trial_id"]] > 0, f"no action of a stand-in in the log of {t['trial_id']}"
        else:
            assert played[t["trial_id"]] == 0

    # The summary: from those returns, mode by mode.
    for mode, summary, row in zip(("ai", "human", "mixed"), doc["summary"], rows, strict=True):
        values = [returns[t["trial_id"]].total for t in trials if t["mode"] == mode]
        assert summary["mode"] == mode and summary["trials"] == TRIALS
        assert summary["mean"] == pytest.approx(sum(values) / TRIALS)
        assert (summary["min"], summary["max"]) == (pytest.approx(min(values)), pytest.approx(max(values)))
        assert row[2] == f"{sum(values) / TRIALS:.2f}"
