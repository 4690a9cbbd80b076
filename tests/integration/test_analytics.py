"""Stream analytics on the real broker: the shipped jobs run beside a live campaign, are
SIGKILLed twice mid-way (once losing their local state), and their final results equal
DuckDB's answers over the logger's archive, with the SQL of docs/analytics.md.
The docs' example job runs too."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import duckdb
import orjson
import pytest

from trialog.analytics import read_results
from trialog.bus.kafka import KafkaBus
from trialog.controller import Controller, run_campaign
from trialog.tools.campaign import start_service, stop_services, wait_archived, wait_ready

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SPEC = str(Path(__file__).resolve().parent / "trialtest.yaml")
DOC = ROOT / "docs" / "analytics.md"
PAIRINGS = [
    {"alice": "random", "bob": "counter"},
    {"alice": "counter", "bob": "random"},
    {"alice": "random", "bob": "random"},
]
TRIALS, WINDOW = 18, 5


def doc_block(language: str, marker: str) -> str:
    """The code block of docs/analytics.md that contains ``marker``."""
    blocks = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)
    [block] = [b for b in blocks if marker in b]
    return block


def sql(marker: str, archive: Path, window: int | None = None) -> list[tuple]:
    query = doc_block("sql", marker).replace("trialog-archive", str(archive))
    if window is not None:
        query = query.replace("n <= 20", f"n <= {window}")
    return duckdb.sql(query).fetchall()


def start_analytics(settings, tmp_path: Path, state: str, run: int):
    proc, port = start_service(
        settings,
        SPEC,
        ["analytics", "--state-dir", str(tmp_path / state), "--window", str(WINDOW)],
        tmp_path / f"analytics-{run}.log",
    )
    wait_ready({"analytics": proc}, {"analytics": port}, tmp_path, timeout=60)
    return proc


async def test_analytics_survive_sigkill_and_equal_duckdb_over_the_archive(kafka_settings, tmp_path):
    bus = KafkaBus(kafka_settings)
    await bus.create_topics()
    archive = tmp_path / "archive"
    procs, ports = {}, {}
    for name, args in {"orchestrator": ["orchestrator"], "environment": ["environment"], "actors": ["actors"],
                       "logger": ["logger", "--archive-dir", str(archive), "--grace", "8"]}.items():  # fmt: skip
        procs[name], ports[name] = start_service(kafka_settings, SPEC, args, tmp_path / f"{name}.log")
    analytics = None
    try:
        wait_ready(procs, ports, tmp_path)
        analytics = start_analytics(kafka_settings, tmp_path, "state-a", 1)
        async with bus, Controller(bus, name="analytics-test") as ctl:
            # Slow ticks (50 ms) so that the campaign is still running when the job is killed.
            campaign = asyncio.create_task(
                run_campaign(
                    ctl,
                    "trialtest",
                    TRIALS,
                    3,
                    overrides=lambda i: {
                        "environment": "slow",
                        "max_ticks": 10 + i % 5,
                        "seed": i,
                        "implementations": PAIRINGS[i % 3],
                    },
                )
            )

            async def results(job: str) -> dict:
                return await read_results(bus, job)

            async def trials_done(n: int) -> bool:
                return len(await results("trials")) >= n

            kills = []
            for at, state in ((3, "state-a"), (9, "state-b")):  # the second restart loses its local state
                while not await trials_done(at):
                    await asyncio.sleep(0.3)
                analytics.kill()  # SIGKILL: no clean shutdown, no last commit
                analytics.wait()
                kills.append((at, campaign.done()))
                analytics = start_analytics(kafka_settings, tmp_path, state, len(kills) + 1)
            result = await campaign
            assert not any(o.error for o in result.outcomes), [o.error for o in result.outcomes if o.error]
            assert not kills[0][1], "the first kill should land while the campaign runs"
            # Three more trials, each rewarded by a judge right after its end (a retroactive
            # reward inside the logger's grace period, so in the archived trial file too):
            # the job revises those trials and the summaries they are part of.
            judged = []
            for seed in (100, 101, 102):
                tid = await ctl.start_trial("trialtest", seed=seed, implementations=PAIRINGS[0])
                await ctl.wait_ended(tid, timeout=60)
                await ctl.send_reward(tid, "alice", 3.0, tick=2, sender="judge")
                judged.append(tid)
            tids = [o.trial_id for o in result.outcomes] + judged
            pairings = Counter(" + ".join(PAIRINGS[i % 3].values()) for i in range(TRIALS)) + Counter(
                {" + ".join(PAIRINGS[0].values()): 3}
            )
            await asyncio.to_thread(wait_archived, str(archive), tids, 120)

            async def settled():
                by_pairing = await results("returns-by-pairing")
                per_trial = await results("trials")
                seen_judge = sum(1 for t in judged if "judge" in per_trial.get(t, {}).get("reward_sources", {}))
                return (
                    (by_pairing, per_trial)
                    if sum(v["trials"] for v in by_pairing.values()) == len(tids) and seen_judge == 3
                    else None
                )

            deadline = asyncio.get_running_loop().time() + 120
            while (done := await settled()) is None:
                assert asyncio.get_running_loop().time() < deadline, "the analytics job did not catch up"
                await asyncio.sleep(1)
            by_pairing, per_trial = done
            sources = await results("reward-sources")
            environments = await results("environments")

        # What people run to read them (docs/analytics.md).
        env = dict(
            os.environ,
            TRIALOG_BOOTSTRAP_SERVERS=kafka_settings.bootstrap_servers,
            TRIALOG_TOPIC_PREFIX=kafka_settings.topic_prefix,
        )
        shown = subprocess.run(
            [sys.executable, "-m", "trialog.cli", "analytics", "returns-by-pairing", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr[-2000:]
        assert {line["key"]: line["value"] for line in map(orjson.loads, shown.stdout.splitlines())} == by_pairing
        shown = subprocess.run(
            [sys.executable, "-m", "trialog.cli", "analytics"], env=env, capture_output=True, text=True, timeout=60
        )
        assert shown.returncode == 0 and "reward-sources" in shown.stdout and "judge:" in shown.stdout, (
            shown.stdout + shown.stderr[-2000:]
        )

        # Per trial and actor, the stream's returns equal DuckDB's over the archive.
        expected_returns = {(t, a): r for t, a, r in sql("-- return per trial and actor", archive)}
        assert set(per_trial) == set(tids)
        streamed = {(t, a): r for t, v in per_trial.items() for a, r in v["returns"].items()}
        assert streamed.keys() == expected_returns.keys()
        assert {k: v for k, v in streamed.items() if v != pytest.approx(expected_returns[k])} == {}
        assert any(v != 0 for v in streamed.values())

        # Rolling returns per pairing and actor, with the docs' SQL.
        rows = sql("-- rolling returns per pairing and actor", archive, window=WINDOW)
        assert {(p, a) for p, a, _, _ in rows} == {
            (p, a) for p, v in by_pairing.items() for a in v["rolling_mean_by_actor"]
        }
        for pairing, actor, rolling, n in rows:
            assert by_pairing[pairing]["rolling_mean_by_actor"][actor] == pytest.approx(rolling), (pairing, actor)
            assert n == min(WINDOW, by_pairing[pairing]["trials"])
        assert pairings == Counter({k: v["trials"] for k, v in by_pairing.items()})

        # Reward sources: the environment's rewards and the judge's three.
        assert sources["judge"]["count"] == 3 and sources["judge"]["total"] == pytest.approx(9.0)
        assert environments["slow"]["trials"] == TRIALS and environments["rps"]["trials"] == 3
        assert sum(e["ticks"] for e in environments.values()) == sum(v["ticks"] for v in per_trial.values())
        # The docs' other queries answer the same (the archive joins a reward once per actor it reaches).
        by_sender = {
            sender: (total, count, trials) for sender, total, count, trials in sql("-- reward sources", archive)
        }
        assert by_sender["judge"] == (pytest.approx(9.0), 3, 3) and by_sender["env"][2] == len(tids)
        assert {env: (trials, ticks) for env, trials, ticks, _ in sql("-- ticks per environment", archive)} == {
            env: (e["trials"], e["ticks"]) for env, e in environments.items()
        }
        assert sql("-- human vs agent", archive) == []  # no client seats in this campaign
    finally:
        stop_services([p for p in [*procs.values(), analytics] if p is not None])


async def test_the_docs_example_job_counts_trial_ends(kafka_settings, tmp_path):
    bus = KafkaBus(kafka_settings)
    await bus.create_topics()
    procs, ports = {}, {}
    for name in ("orchestrator", "environment", "actors"):
        procs[name], ports[name] = start_service(kafka_settings, SPEC, [name], tmp_path / f"{name}.log")
    try:
        wait_ready(procs, ports, tmp_path)
        async with bus, Controller(bus, name="docs-job") as ctl:
            tids = [await ctl.start_trial("trialtest", seed=s) for s in range(3)]
            tids.append(await ctl.start_trial("trialtest", environment="exploding"))
            reasons = Counter([(await ctl.wait_ended(tid, timeout=60)).reason for tid in tids])
        script = tmp_path / "job.py"
        script.write_text(doc_block("python", "ends-by-reason").replace("app.run()", "app.run(timeout=8)"))
        env = dict(
            os.environ,
            TRIALOG_BOOTSTRAP_SERVERS=kafka_settings.bootstrap_servers,
            TRIALOG_TOPIC_PREFIX=kafka_settings.topic_prefix,
            TRIALOG_PARTITIONS=str(kafka_settings.partitions),
        )
        done = subprocess.run(
            [sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, done.stderr[-3000:]
        async with KafkaBus(kafka_settings) as reader:
            counts = await reader.read_latest("analytics.ends-by-reason", orjson.loads)
        assert {k: v["trials"] for k, v in counts.items()} == dict(reasons) and reasons["error"] == 1
    finally:
        stop_services(procs.values())
