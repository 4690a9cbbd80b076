"""The commands people use to look at a deployment, run as a user runs them (a
``trialog`` process) against the real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def trialog(settings, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRIALOG_BOOTSTRAP_SERVERS=settings.bootstrap_servers, TRIALOG_TOPIC_PREFIX=settings.topic_prefix, TRIALOG_PARTITIONS=str(settings.partitions))
    return subprocess.run([sys.executable, "-m", "trialog.cli", *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_run_ends_with_the_plot_of_its_campaign(kafka_settings, tmp_path):
    out = tmp_path / "plots" / "rps.png"
    done = trialog(kafka_settings, "run", "examples/rps.yaml", "--serve", "--trials", "4", "--concurrency", "2", "--plot", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == f"plot: {out}"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(out.with_suffix(".json").read_text())
    assert list(data["series"]) == ["random + counter"] and [x for x, _ in data["series"]["random + counter"]] == [1, 2, 3, 4]
