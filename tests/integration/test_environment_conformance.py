"""The environment conformance suite on the real broker: it passes Trialog's own
environment service, fails one whose tags are not the environment key's, and fails an
environment that is not the reference it claims to equal (the Go environment is run
through it by .ci/sdk.sh)."""

import base64
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = "tests/integration/conformance_env.yaml"


def _conformance(settings, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "TRIALOG_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRIALOG_TOPIC_PREFIX": settings.topic_prefix,
    }
    cmd = [sys.executable, "-m", "trialog.cli", "conformance", "--spec", SPEC, *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)


def _lines(out: str, status: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(status + "  ")]


def test_the_python_environment_service_passes_every_check(kafka_settings):
    done = _conformance(kafka_settings, "--environment", "rps", "--same-as", "rps")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "conformance: 8 passed, 0 failed, 0 skipped" in done.stdout, done.stdout


def test_records_tagged_with_another_environment_key_fail(kafka_settings):
    wrong = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
    command = (
        f"env TRIALOG_KEY_ENVIRONMENT={wrong} {sys.executable} -m trialog.cli serve environment "
        f"--implementation rps --spec {SPEC} --health-port 0"
    )
    done = _conformance(kafka_settings, "--environment", "rps", "--command", command)
    assert done.returncode == 1, done.stdout + done.stderr
    failed = _lines(done.stdout, "FAIL")
    assert any("tags what it writes" in line for line in failed), done.stdout
    assert "SKIP  observations and rewards equal the reference" in done.stdout


def test_an_environment_unlike_its_reference_fails(kafka_settings):
    done = _conformance(kafka_settings, "--environment", "lopsided", "--same-as", "rps")
    assert done.returncode == 1, done.stdout + done.stderr
    assert [line.split("  ", 1)[1] for line in _lines(done.stdout, "FAIL")] == [
        "observations and rewards equal the reference environment's"
    ], done.stdout
    assert "the reference gives" in done.stdout
