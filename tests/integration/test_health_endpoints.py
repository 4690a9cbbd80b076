"""Every long-running service answers its liveness and readiness probes, and lists what its
tasks wait on when sent SIGUSR1."""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import wait_for
from trialog.bus.kafka import KafkaBus
from trialog.tools.campaign import start_service, stop_services

pytestmark = pytest.mark.integration
SPEC = str(Path(__file__).resolve().parent / "trialtest.yaml")


def probe(port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")
    except OSError:
        return 0, {}


@pytest.mark.parametrize("service", ["orchestrator", "environment", "actors", "logger"])
async def test_service_is_live_then_ready(kafka_settings, tmp_path, service):
    await KafkaBus(kafka_settings).create_topics()
    args = [service, "--archive-dir", str(tmp_path / "archive")] if service == "logger" else [service]
    proc, port = start_service(kafka_settings, SPEC, args, tmp_path / f"{service}.log")
    try:
        await wait_for(lambda: probe(port, "/livez")[0] == 200, timeout=60, what=f"{service} /livez")
        # Ready once it owns its partitions and has caught up from the log.
        await wait_for(lambda: probe(port, "/readyz")[0] == 200, timeout=60, what=f"{service} /readyz")
        status, body = probe(port, "/readyz")
        assert body.get("status") == "ok"
        assert probe(port, "/nope")[0] == 404
        os.kill(proc.pid, signal.SIGUSR1)
        log = tmp_path / f"{service}.log"
        await wait_for(lambda: "tasks listed" in log.read_text(), timeout=10, what=f"{service}'s task list")
        assert "task waiting" in log.read_text() and "kafka_consumer.py" in log.read_text()  # its poll, at least
    finally:
        stop_services([proc])
    assert proc.returncode == 0, (tmp_path / f"{service}.log").read_text()[-2000:]
