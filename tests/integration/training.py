"""`trialog train` as the integration tests run it: a preset written for the test, trained
through the log on the real broker, and the model versions it published."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trialog import model_registry
from trialog.bus.kafka import KafkaBus
from trialog.tools.campaign import _settings_env

ROOT = Path(__file__).resolve().parents[2]


def train(settings, tmp_path: Path, preset: str, *args: str, timeout: float = 420) -> subprocess.CompletedProcess:
    """Writes the preset's source to tmp_path and runs `trialog train` on it (JSON logs, out
    in tmp_path/run, then args); what it printed is the result's stdout and stderr."""
    path = tmp_path / "preset.py"
    path.write_text(preset)
    return subprocess.run(
        [sys.executable, "-m", "trialog.cli", "train", str(path), "--out", str(tmp_path / "run"), *args],
        env={**_settings_env(settings), "TRIALOG_LOG_FORMAT": "json"},
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


async def latest_version(settings, model: str):
    """The latest version of model on the log, or None."""
    async with KafkaBus(settings) as bus:
        return (await model_registry.latest_versions(bus)).get(model)
