"""TensorBoard curves while a run goes (trialog.learn.curves), in-process: the event files
read back — TFRecord framing, tensorboardX's Event protobuf, no TensorFlow — hold the run's
returns and evaluations and the learner's losses, value estimates and versions, against
increasing env steps. tests/integration/test_learning_curves.py reads them through the log."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tensorboardX.proto.event_pb2 import Event

from trialog.learn.in_process import train_in_process
from trialog.learn.train import Preset, Schedule

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = str(ROOT / "examples" / "cartpole" / "spec.yaml")


def read_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the event files in ``log_dir`` (not its sub-folders): tag -> [(step, value)].
    A TFRecord is a little-endian u64 length, its CRC (u32), the bytes, their CRC (u32)."""
    scalars: dict[str, list[tuple[int, float]]] = defaultdict(list)
    files = sorted(log_dir.glob("events.out.tfevents.*"))
    assert files, f"no event file in {log_dir}"
    for file in files:
        data, at = file.read_bytes(), 0
        while at < len(data):
            (length,) = struct.unpack_from("<Q", data, at)
            event = Event.FromString(data[at + 12 : at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                scalars[value.tag].append((event.step, value.simple_value))
    return dict(scalars)


def assert_curve(scalars: dict, tag: str) -> list[tuple[int, float]]:
    """The tag has points, at non-decreasing steps that advance."""
    points = scalars.get(tag, [])
    steps = [s for s, _ in points]
    assert len(points) >= 2 and steps == sorted(steps) and steps[-1] > steps[0], (tag, points)
    return points


def tiny(implementation: str, **agent) -> Preset:
    return Preset(
        name=f"curves-{implementation}",
        spec=CARTPOLE,
        implementation=implementation,
        agent={"hidden": [16], **agent},
        schedule=Schedule(heatup_steps=200, steps_between_evaluations=300, evaluation_trials=2, total_steps=900,
                          concurrency=2),
    )  # fmt: skip


def test_an_in_process_dqn_run_writes_returns_evaluations_losses_and_value_estimates(tmp_path):
    preset = tiny("dqn", learning_starts=200, train_frequency=100, gradient_steps=10, exploration_steps=500)
    result = train_in_process(preset, tmp_path / "run", quiet=True)
    run = read_scalars(tmp_path / "run" / "tensorboard")
    returns = assert_curve(run, "train/return")
    assert len(returns) == result.episodes and returns[-1][0] == result.env_steps
    evaluations = assert_curve(run, "evaluate/mean_return")
    assert evaluations == [(e.env_steps, e.mean_return) for e in result.evaluations]
    rates = run["train/env_steps_per_s"]  # every 2 s, and over the trials before each evaluation
    assert len(rates) >= len(result.evaluations) and all(v > 0 for _, v in rates)
    learner = read_scalars(tmp_path / "run" / "tensorboard" / "learner")
    losses = assert_curve(learner, "learner/loss")
    assert all(v >= 0 for _, v in losses)
    assert_curve(learner, "learner/q_mean")
    versions = [v for _, v in assert_curve(learner, "learner/model_version")]
    assert versions == list(range(1, result.model_version + 1))


def test_an_in_process_ppo_run_writes_its_value_estimates_and_what_it_discarded(tmp_path):
    preset = tiny("ppo", rollout_steps=128, minibatches=2, update_epochs=2)
    train_in_process(preset, tmp_path / "run", quiet=True, tensorboard=tmp_path / "tb")
    assert not (tmp_path / "run" / "tensorboard").exists()  # the folder asked for, not the default
    learner = read_scalars(tmp_path / "tb" / "learner")
    for tag in ("loss", "value_mean", "value_loss", "policy_loss", "entropy", "discarded"):
        assert_curve(learner, f"learner/{tag}")
    assert_curve(read_scalars(tmp_path / "tb"), "train/return")


def test_trialog_train_in_process_prints_the_tensorboard_folder_it_writes(tmp_path):
    tb = tmp_path / "curves"
    done = subprocess.run(
        [sys.executable, "-m", "trialog.cli", "train", str(ROOT / "presets" / "dqn_acrobot.py"), "--in-process",
         "--total-steps", "1500", "--out", str(tmp_path / "run"), "--tensorboard", str(tb)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr  # a short run may miss the validation rule
    assert f"TensorBoard curves in {tb}" in done.stderr
    assert_curve(read_scalars(tb), "train/return")
    assert_curve(read_scalars(tb / "learner"), "learner/loss")
    assert (tmp_path / "run" / "eval_return.png").stat().st_size > 0  # the end-of-run plot stays


def test_read_scalars_reads_what_a_writer_wrote(tmp_path):
    from trialog.learn.curves import Curves

    curves = Curves(tmp_path)
    curves.scalars("g", {"x": 1.5}, 3)
    curves.scalars("g", {"x": -2.0}, 7)
    curves.close()
    assert read_scalars(tmp_path) == {"g/x": [(3, 1.5), (7, -2.0)]}
