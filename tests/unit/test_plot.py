"""Plots: the series a plot draws, the files it writes, and `trialog plot` from an
archive and from the log (in-memory bus; the campaign's plot runs on Kafka in CI's demo)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.harness import deployment
from trialog.bus.memory import MemoryBus
from trialog.datalog.archive import Archive
from trialog.errors import TrialogError
from trialog.services.logger.main import loop_for as logger_loop
from trialog.spec import load_spec
from trialog.tools.plot import (
    TrialReturn,
    plot_returns,
    plot_series,
    returns_from_archive,
    returns_from_log,
    returns_series,
    rolling_mean,
)

SPEC = Path(__file__).resolve().parents[2] / "examples" / "rps" / "spec.yaml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def returns(*rows) -> list[TrialReturn]:
    return [
        TrialReturn(f"t{i}", pairing, {"a": a, "b": b}, samples, phase=phase)
        for i, (pairing, a, b, samples, phase) in enumerate(rows)
    ]


def test_series_per_trial_and_per_sample_by_pairing_and_phase():
    trials = returns(("x + y", 1, 0, 10, "train"), ("y + y", 2, 2, 4, "train"), ("x + y", 0, 3, 6, "evaluate"))
    assert returns_series(trials) == {"x + y": [(1, 1), (2, 3)], "y + y": [(1, 4)]}
    assert returns_series(trials, x="sample", actor="b") == {"x + y": [(10, 0), (16, 3)], "y + y": [(4, 2)]}
    assert returns_series(trials, by="phase") == {"train": [(1, 1), (2, 4)], "evaluate": [(1, 3)]}


def test_rolling_mean_uses_fewer_values_at_the_start():
    assert rolling_mean([1, 3, 5, 7], 2) == [1, 2, 4, 6]
    assert rolling_mean([2.0], 10) == [2.0]


def test_plot_writes_a_png_and_the_same_data_as_csv_and_json(tmp_path):
    series = {"dqn": [(100, 9.0), (200, 30.5), (300, 120.0)], "random": [(100, 20.0)]}
    files = plot_series(series, tmp_path / "sub" / "curve", title="t", x_label="steps", y_label="return", rolling=2)
    assert files.png == tmp_path / "sub" / "curve.png"
    assert files.png.read_bytes()[:8] == PNG_MAGIC and files.png.stat().st_size > 5000
    with open(files.csv) as f:
        rows = list(csv.DictReader(f))
    assert [(r["series"], float(r["x"]), float(r["y"])) for r in rows] == [
        (k, x, y) for k in sorted(series) for x, y in series[k]
    ]
    doc = json.loads(files.json.read_text())
    assert doc["x_label"] == "steps" and doc["series"]["dqn"] == [[100, 9.0], [200, 30.5], [300, 120.0]]


def test_nothing_to_plot_says_what_to_do(tmp_path):
    with pytest.raises(TrialogError, match="run a campaign first"):
        plot_returns([], tmp_path / "x.png")


async def test_returns_from_archive_and_log_agree_and_the_cli_plots_them(memory_settings, tmp_path, capsys):
    from trialog import cli

    bus = MemoryBus(memory_settings)
    spec = load_spec(SPEC, bus.store)
    async with deployment(bus, spec) as (d, ctl):
        d.add([logger_loop(bus, tmp_path / "archive", grace_s=0.1)])
        tids = []
        for seed, impls in ((1, {}), (2, {"alice": "counter"}), (3, {})):
            tid = await ctl.start_trial("rps", seed=seed, implementations=impls)
            await ctl.wait_ended(tid, timeout=20)
            tids.append(tid)
        await wait_for(lambda: all(Archive(tmp_path / "archive").entry(t) for t in tids), timeout=10, what="archives")
        from_log = await returns_from_log(bus, "rps")
        live = {t: ctl.returns(t) for t in tids}
    from_archive = returns_from_archive(tmp_path / "archive", "rps")
    assert [t.trial_id for t in from_archive] == [t.trial_id for t in from_log] == tids
    # start times differ (the archive's is the trial's first event, the index's the request)
    assert [(t.returns, t.pairing, t.samples) for t in from_archive] == [
        (t.returns, t.pairing, t.samples) for t in from_log
    ]
    assert [dict(t.returns) for t in from_archive] == [live[t] for t in tids]
    assert len({t.pairing for t in from_archive}) == 2 and all(t.samples > 0 for t in from_archive)

    out = tmp_path / "plots" / "r.png"
    capsys.readouterr()
    assert (
        cli.main(
            [
                "plot",
                "--from-archive",
                str(tmp_path / "archive"),
                "--out",
                str(out),
                "--per",
                "sample",
                "--actor",
                "alice",
            ]
        )
        == 0
    )
    assert "3 trial(s) plotted" in capsys.readouterr().out
    assert out.read_bytes()[:8] == PNG_MAGIC
    doc = json.loads(out.with_suffix(".json").read_text())
    assert sum(len(points) for points in doc["series"].values()) == 3
    assert sorted(y for points in doc["series"].values() for _, y in points) == sorted(
        t.returns["alice"] for t in from_archive
    )
