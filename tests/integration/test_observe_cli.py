"""The commands people use to look at a deployment, run as a user runs them (a
``trialog`` process) against the real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def trialog(settings, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        TRIALOG_BOOTSTRAP_SERVERS=settings.bootstrap_servers,
        TRIALOG_TOPIC_PREFIX=settings.topic_prefix,
        TRIALOG_PARTITIONS=str(settings.partitions),
    )
    return subprocess.run(
        [sys.executable, "-m", "trialog.cli", *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def test_run_ends_with_the_plot_of_its_campaign(kafka_settings, tmp_path):
    out = tmp_path / "plots" / "rps.png"
    done = trialog(
        kafka_settings,
        "run",
        "examples/rps/spec.yaml",
        "--serve",
        "--trials",
        "4",
        "--concurrency",
        "2",
        "--plot",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == f"plot: {out}"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(out.with_suffix(".json").read_text())
    assert list(data["series"]) == ["random + counter"] and [x for x, _ in data["series"]["random + counter"]] == [
        1,
        2,
        3,
        4,
    ]


def test_json_outputs_of_settings_broker_trials_and_dead_letters(kafka_settings, tmp_path):
    from trialog.tools.campaign import local_services

    settings_json = json.loads(trialog(kafka_settings, "settings", "--json").stdout)
    assert (
        settings_json["topic_prefix"]["value"] == kafka_settings.topic_prefix and "help" in settings_json["partitions"]
    )
    status = trialog(kafka_settings, "broker", "status", "--json")
    assert set(json.loads(status.stdout)) == {"running", "data_dir", "pid", "bootstrap", "kafka_version"}

    assert trialog(kafka_settings, "topics", "create").returncode == 0
    with local_services(kafka_settings, str(ROOT / "examples" / "rps" / "spec.yaml"), log_dir=str(tmp_path)):
        env = dict(
            os.environ,
            TRIALOG_BOOTSTRAP_SERVERS=kafka_settings.bootstrap_servers,
            TRIALOG_TOPIC_PREFIX=kafka_settings.topic_prefix,
        )
        watch = subprocess.Popen(
            [sys.executable, "-m", "trialog.cli", "trial", "watch", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            time.sleep(3)  # the watcher reads from the log's end: let it get there first
            started = trialog(kafka_settings, "trial", "start", "rps", "--seed", "4", "--wait")
            assert started.returncode == 0, started.stderr[-2000:]
            tid = started.stdout.split()[0]
            seen = []
            for line in watch.stdout:
                event = json.loads(line)
                if event["trial_id"] == tid:
                    seen.append(event["kind"])
                    if event["kind"] == "trial.ended":
                        assert event["reason"] in ("environment", "max_ticks") and event["tick"] > 0
                        break
            assert seen[0] == "trial.started" and seen[-1] == "trial.ended"
        finally:
            watch.kill()
        listed = [json.loads(line) for line in trialog(kafka_settings, "trial", "list", "--json").stdout.splitlines()]
        assert [(r["trial_id"], r["status"], r["implementations"]) for r in listed] == [
            (tid, "ended", {"alice": "random", "bob": "counter"})
        ]
        assert set(listed[0]["returns"]) == {"alice", "bob"}  # an ended trial's returns, from the index
        # The table keeps the columns scripts read (.ci/sdk.sh: `read trial _ status _ reason`).
        row = next(line for line in trialog(kafka_settings, "trial", "list").stdout.splitlines() if tid in line)
        assert row.split()[2:3] == ["ended"] and row.split()[-1] in ("environment", "max_ticks"), row

        # A record nobody can use: the orchestrator dead-letters it; the command lists and explains it.
        script = (
            "import asyncio\nfrom trialog.bus import connect\nfrom trialog.settings import Settings\n"
            "async def go():\n    async with connect(Settings.load()) as bus:\n"
            "        await bus.send_many([('events', b'ghost-trial', b'garbage', [('kind', b'observation')])])\n"
            "asyncio.run(go())\n"
        )
        assert subprocess.run([sys.executable, "-c", script], env=env, timeout=60).returncode == 0
        for _ in range(60):
            letters = [
                json.loads(line) for line in trialog(kafka_settings, "dead-letters", "--json").stdout.splitlines()
            ]
            if letters:
                break
            time.sleep(0.5)
        [letter] = letters
        assert (letter["trial_id"], letter["kind"], letter["service"]) == ("ghost-trial", "observation", "orchestrator")
        # Untagged, so refused before anything else (docs/security.md).
        assert letter["reason"].startswith("refused:") and letter["explanation"].startswith(
            "not tagged by a key allowed to write it"
        )
        text = trialog(kafka_settings, "dead-letters").stdout
        assert (
            "1 dead letter(s)" in text and "ghost-trial" in text and "not tagged by a key allowed to write it" in text
        )
