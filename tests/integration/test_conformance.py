"""The conformance suite on the real broker: it passes a Python implementation that
follows the protocol and fails one that does not (services in other languages are run
through it by .ci/sdk.sh)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = "tests/integration/conformance.yaml"


def _conformance(settings, implementation: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "TRIALOG_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRIALOG_TOPIC_PREFIX": settings.topic_prefix,
    }
    cmd = [
        sys.executable,
        "-m",
        "trialog.cli",
        "conformance",
        "--spec",
        SPEC,
        "--implementation",
        implementation,
        "--trials",
        "2",
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_python_implementation_passes_every_check(kafka_settings):
    done = _conformance(kafka_settings, "counter")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "conformance: 5 passed, 0 failed, 1 skipped" in done.stdout
    assert done.stdout.count("PASS  ") == 5


def test_an_implementation_that_misses_a_tick_fails(kafka_settings):
    done = _conformance(kafka_settings, "skips")
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAIL  ")]
    assert any("exactly once" in line for line in failed), done.stdout
    assert "no action from alice, bob" in done.stdout or "no action of" in done.stdout
