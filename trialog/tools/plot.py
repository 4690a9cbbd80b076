"""Pictures of what trials returned: PNG plots with their data written beside them.

Every plot is three files with one stem: ``NAME.png`` (the picture), ``NAME.csv``
(one row per point: ``series,x,y``) and ``NAME.json`` (title, axis labels and the
series), so a figure can always be checked, re-drawn or compared without the PNG.

Two entry points:

* :func:`plot_series` draws any named series of (x, y) points — e.g. evaluation
  return per environment step of a training run.
* :func:`plot_returns` draws trial returns (:class:`TrialReturn`, built from the
  archive by :func:`returns_from_archive`, from the log by :func:`returns_from_log`
  or from a campaign's results) per trial or per sample, one series per
  implementation pairing or per experiment phase.

Drawing uses matplotlib's object API (no pyplot, no global state), so it is safe
in services and threads. Install the extra: ``pip install 'trialog[plot]'``.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trialog.errors import TrialogError

Grouping = Literal["pairing", "phase"]
Axis = Literal["trial", "sample"]
NO_PHASE = "(no phase)"


@dataclass(frozen=True)
class PlotFiles:
    """The files one plot wrote."""

    png: Path
    csv: Path
    json: Path


@dataclass(frozen=True)
class TrialReturn:
    """What one trial returned: per actor, the sum over ticks of its aggregated reward (I-4)."""

    trial_id: str
    pairing: str  # the implementation of each actor, in the trial's actor order, joined by " + "
    returns: Mapping[str, float]
    samples: int  # rows of the datalog: one per (tick, actor)
    started_ms: int = 0
    phase: str = NO_PHASE
    experiment: str = ""

    @property
    def total(self) -> float:
        return sum(self.returns.values())

    def value(self, actor: str | None) -> float:
        """The return plotted: one actor's, or the sum over actors (``actor=None``)."""
        return self.total if actor is None else self.returns.get(actor, 0.0)


def pairing_label(implementations: Iterable[str]) -> str:
    return " + ".join(implementations)


def trial_return(started, samples: Sequence, started_ms: int = 0) -> TrialReturn:
    """Fold a trial's samples (from the archive or the log) into its return."""
    returns = {a.name: 0.0 for a in started.actors}
    for s in samples:
        returns[s.actor] = returns.get(s.actor, 0.0) + s.reward
    return TrialReturn(
        trial_id=started.trial_id,
        pairing=pairing_label(a.implementation for a in started.actors),
        returns=returns,
        samples=len(samples),
        started_ms=started_ms,
        # Trials record their experiment and phase once learners exist; older ones have none.
        phase=getattr(started, "phase", None) or NO_PHASE,
        experiment=getattr(started, "experiment", None) or "",
    )


def returns_from_archive(root: str | Path, spec: str | None = None) -> list[TrialReturn]:
    """The returns of the archived trials (corrections applied), oldest first."""
    from trialog.datalog.archive import Archive

    archive = Archive(root)
    out = []
    for trial_id, entry in archive.catalog().items():
        if spec is None or entry["spec"] == spec:
            trial = archive.read(trial_id)
            out.append(trial_return(trial.started, trial.samples, entry.get("started_ms", 0)))
    return sorted(out, key=lambda t: (t.started_ms, t.trial_id))


async def returns_from_log(bus, spec: str | None = None) -> list[TrialReturn]:
    """The returns of the trials in the ``trials`` index, replayed from ``events``, oldest first."""
    from trialog.datalog.replay import read_trials

    created: dict[str, int] = {}

    def select(record) -> bool:
        created[record.trial_id] = record.created_ms
        return spec is None or record.spec == spec

    out = []
    async for fold in read_trials(bus, select):
        if fold.started is not None:
            out.append(trial_return(fold.started, fold.samples(), created.get(fold.trial_id, 0)))
    return sorted(out, key=lambda t: (t.started_ms, t.trial_id))


def returns_series(
    trials: Sequence[TrialReturn], *, by: Grouping = "pairing", x: Axis = "trial", actor: str | None = None
) -> dict[str, list[tuple[float, float]]]:
    """Group trials into series (per pairing or per phase); x is the trial's rank in its
    series (1, 2, …) or the samples of the series up to and including the trial."""
    key: Callable[[TrialReturn], str] = (lambda t: t.pairing) if by == "pairing" else (lambda t: t.phase)
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    seen: dict[str, int] = defaultdict(int)
    for t in trials:
        label = key(t)
        seen[label] += 1 if x == "trial" else t.samples
        series[label].append((float(seen[label]), t.value(actor)))
    return dict(series)


def plot_returns(
    trials: Sequence[TrialReturn], out: str | Path, *, by: Grouping = "pairing", x: Axis = "trial",
    actor: str | None = None, title: str | None = None, rolling: int = 10,
) -> PlotFiles:  # fmt: skip
    """Plot trial returns per trial or per sample, one series per pairing or phase."""
    if not trials:
        raise TrialogError(
            "no trials to plot: run a campaign first, or check --spec and where the trials are read from"
        )
    whose = f"return of {actor}" if actor else "return (sum over actors)"
    return plot_series(
        returns_series(trials, by=by, x=x, actor=actor),
        out,
        title=title or f"{whose} per {x}, by {by}",
        x_label="trial" if x == "trial" else "samples (tick × actor)",
        y_label=whose,
        rolling=rolling,
    )


def plot_series(
    series: Mapping[str, Sequence[tuple[float, float]]], out: str | Path, *, title: str, x_label: str, y_label: str,
    rolling: int = 0,
) -> PlotFiles:  # fmt: skip
    """Draw each series as points (and, with ``rolling`` > 1, its rolling mean as a line);
    write ``out`` (a .png) and the data beside it (.csv, .json). Returns the three paths."""
    Figure = _figure_class()
    png = Path(out)
    if png.suffix.lower() != ".png":
        png = png.with_suffix(".png")
    png.parent.mkdir(parents=True, exist_ok=True)
    files = PlotFiles(png, png.with_suffix(".csv"), png.with_suffix(".json"))

    fig = Figure(figsize=(8, 4.5), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    for label, points in sorted(series.items()):
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        if rolling > 1 and len(points) > 1:
            dots = ax.plot(xs, ys, ".", alpha=0.35)[0]
            ax.plot(
                xs, rolling_mean(ys, rolling), "-", color=dots.get_color(), label=f"{label} (mean of last {rolling})"
            )
        else:
            ax.plot(xs, ys, ".-", label=label)
    ax.set_title(title)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.grid(True, alpha=0.3)
    if all(float(x).is_integer() for points in series.values() for x, _ in points):
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # trial 3, not trial 2.5
    if series:
        ax.legend(fontsize="small")
    fig.savefig(files.png)

    with open(files.csv, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["series", "x", "y"])
        for label, points in sorted(series.items()):
            writer.writerows([label, x, y] for x, y in points)
    doc = {
        "title": title,
        "x_label": x_label,
        "y_label": y_label,
        "series": {k: [list(p) for p in v] for k, v in sorted(series.items())},
    }
    files.json.write_text(json.dumps(doc, indent=1) + "\n")
    return files


def rolling_mean(values: Sequence[float], window: int) -> list[float]:
    """Mean of the last ``window`` values at each position (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise TrialogError("plots need matplotlib: pip install 'trialog[plot]'") from None
    return Figure
