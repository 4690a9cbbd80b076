"""Running a fault suite (tools/fuzz.py, tools/chaos.py) the way its docs write it, and reading its figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_suite(command: list[str], out: Path, *, timeout: float) -> dict:
    """Run ``python COMMAND --json OUT`` from the repository root; return its figures, after
    checking that its exit code says whether every target was met."""
    run = subprocess.run(
        [sys.executable, *command, "--json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )
    print(run.stdout, run.stderr[-8000:])  # a stall ends with each service's last log lines
    assert out.exists(), (
        f"{command[0]} ended without figures (exit {run.returncode}):\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    )
    result = json.loads(out.read_text())
    assert run.returncode == (0 if result["ok"] else 1), "the exit code must say whether every target is met"
    return result
