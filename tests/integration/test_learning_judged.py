"""Learning from a judge, on the real broker: `trialog train presets/dqn_cartpole_judged.py`
(short) runs a gateway and a `trialog judge` process beside the services; the judge rates
every step of the heatup and train trials late, through the gateway's watch sockets, and
the datalog joins each rating to the tick it rates."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

from trialog.bus.kafka import KafkaBus
from trialog.datalog.replay import read_trials
from trialog.examples.cartpole.judge import upright
from trialog.protocol.topics import EVENTS
from trialog.tools.judge import JUDGE_LAG

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
JUDGE = "person:judge-0"


async def _late(bus: KafkaBus) -> tuple[int, list[str]]:
    """Read the events topic in log order: how many judge rewards, and those not written late
    (before their trial had reached tick + lag and before its end)."""
    consumer = bus.consumer([EVENTS], from_start=True)
    await consumer.start()
    reached: dict[str, int] = defaultdict(int)
    done: set[str] = set()
    count, early, quiet = 0, [], 0
    try:
        while quiet < 3:
            records = await consumer.poll(timeout_ms=1000)
            quiet = 0 if records else quiet + 1
            for r in records:
                e = bus.codec.decode(r.value, r.header("kind"))
                if e.KIND == "observation":
                    reached[e.trial_id] = max(reached[e.trial_id], e.tick)
                elif e.KIND == "environment.done":
                    done.add(e.trial_id)
                elif e.KIND == "reward" and e.sender == JUDGE:
                    count += 1
                    if e.tick + JUDGE_LAG > reached[e.trial_id] and e.trial_id not in done:
                        early.append(f"{e.trial_id} tick {e.tick} rated at tick {reached[e.trial_id]}")
    finally:
        await consumer.stop()
    return count, early


async def test_a_judge_rates_every_step_late_and_the_datalog_joins_each_rating_to_its_tick(kafka_settings, tmp_path):
    prefix = f"test-judged-{uuid.uuid4().hex[:8]}."
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "trialog.cli", "train", str(ROOT / "presets" / "dqn_cartpole_judged.py"),
         "--total-steps", "1200", "--topic-prefix", prefix, "--out", str(out),
         "--bootstrap-servers", kafka_settings.bootstrap_servers],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: the short run does not reach the validation
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "log" and summary["env_steps"] >= 1200
    judge_log = (out / "logs" / "judge-0.log").read_text()
    assert " 0 refused" in judge_log and "ratings sent" in judge_log, judge_log[-2000:]

    bus = KafkaBus(dataclasses.replace(kafka_settings, topic_prefix=prefix))
    folds = [f async for f in read_trials(bus, lambda r: r.experiment == "dqn-cartpole-judged")]
    learning = [f for f in folds if f.started.phase in ("heatup", "train")]
    evaluation = [f for f in folds if f.started.phase == "evaluate"]
    assert len(learning) >= 10 and evaluation
    rated = 0
    for fold in learning:
        samples = fold.samples()
        for now, after in zip(samples, samples[1:], strict=False):
            ratings = [r for r in now.reward_sources if r.sender == JUDGE]
            assert len(ratings) == 1, (fold.trial_id, now.tick, now.reward_sources)
            assert ratings[0].value == upright(None, after.observation, after.final)
            assert ratings[0].confidence == pytest.approx(0.8)
            assert any(r.sender == "env" for r in now.reward_sources)  # the log keeps every source
            rated += 1
    assert rated >= 1000
    for fold in evaluation:  # the judge leaves evaluation trials alone: their return is the environment's
        assert not any(r.sender == JUDGE for s in fold.samples() for r in s.reward_sources)
    count, early = await asyncio.wait_for(_late(bus), 120)
    assert count >= rated and not early, early[:5]
