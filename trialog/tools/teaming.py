"""A teaming evaluation: the same environment played by AI-only, human-only and human+AI teams.

One environment, three ways of filling its seats (:data:`MODES`):

* ``ai`` (AI-only): every actor played by the agent implementation;
* ``human`` (human-only): every actor a person — the client implementation (``client: true``);
* ``mixed`` (human+AI): the first actor a person, the others the agent.

N trials of each mode run on the deployment (trial *i* of every mode gets the same seed when
one is given, so the modes meet the same layouts). People join by their seats' join links
(:meth:`trialog.controller.Controller.join_links`), printed one line per seat, through the
real gateway — or a scripted stand-in (:mod:`trialog.tools.person`) plays each seat through
the same socket. The trials' returns are then read back from the log
(:func:`trialog.tools.plot.trial_return` over :func:`trialog.datalog.replay.read_trials`: the
computation ``trialog plot`` uses) and summarised per mode — trials, mean return, its 95%
confidence interval (Student's t), min, max — as a table, a plot (PNG) and the data (CSV, JSON).
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from trialog.errors import TrialogError
from trialog.settings import Settings
from trialog.spec import Spec
from trialog.tools.person import Person, seat_players
from trialog.tools.plot import TrialReturn, trial_return

MODES = {"ai": "AI-only", "human": "human-only", "mixed": "human+AI"}
COMPLETE = ("environment", "max_ticks")  # the ends of trials that the summary counts

# Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom; past 30, the
# quantile of the largest tabulated degrees of freedom not above (a slightly wider interval).
_T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
    11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086,
    21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042,
    40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (1.96 past 120)."""
    if df < 1:
        raise ValueError("a confidence interval needs at least 2 values")
    if df > 120:
        return 1.960
    return _T975[max(d for d in _T975 if d <= df)]


@dataclass(frozen=True)
class ModeSummary:
    """One row of the table: a mode's trials and their returns."""

    mode: str
    label: str
    trials: int
    mean: float
    ci_low: float  # the mean's 95% confidence interval (NaN with fewer than 2 trials)
    ci_high: float
    min: float
    max: float


def summarize(mode: str, values: Sequence[float]) -> ModeSummary:
    """Mean, 95% confidence interval of the mean (mean ± t·s/√n, s the sample standard
    deviation), min and max of a mode's returns."""
    n = len(values)
    if n == 0:
        nan = math.nan
        return ModeSummary(mode, MODES.get(mode, mode), 0, nan, nan, nan, nan, nan)
    mean = sum(values) / n
    if n > 1:
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        half = t975(n - 1) * sd / math.sqrt(n)
        low, high = mean - half, mean + half
    else:
        low = high = math.nan
    return ModeSummary(mode, MODES.get(mode, mode), n, mean, low, high, min(values), max(values))


@dataclass(frozen=True)
class TeamTrial:
    """One trial of the evaluation: its mode, rank in the mode, how it ended and what it returned."""

    mode: str
    index: int  # 1, 2, … within the mode
    trial_id: str
    implementations: Mapping[str, str]
    reason: str  # trial.ended's reason
    ticks: int
    stand_in_actions: Mapping[str, int] = field(default_factory=dict)  # seat -> actions its stand-in sent
    result: TrialReturn | None = None  # from the log

    @property
    def complete(self) -> bool:
        """Ended by the environment or max_ticks (not a join timeout, an error…), its return in the log."""
        return self.reason in COMPLETE and self.result is not None

    def value(self, actor: str | None = None) -> float:
        if self.result is None:
            raise TrialogError(f"trial {self.trial_id} has no return in the log")
        return self.result.value(actor)


def mode_implementations(spec: Spec, mode: str, agent: str, person: str) -> dict[str, str]:
    """Actor → implementation for a mode (``ai``, ``human`` or ``mixed``)."""
    actors = [a.name for a in spec.trial.actors]
    for impl, client, role in ((agent, False, "--agent"), (person, True, "--person-impl")):
        if impl not in spec.actors:
            raise TrialogError(f"{role} {impl!r} is not an implementation of spec {spec.name!r}")
        if spec.actors[impl].client != client:
            kind = "a client implementation (client: true)" if client else "an agent (not client: true)"
            raise TrialogError(f"{role} {impl!r} must be {kind} in spec {spec.name!r}")
    if mode == "ai":
        return dict.fromkeys(actors, agent)
    if mode == "human":
        return dict.fromkeys(actors, person)
    if mode == "mixed":
        return {a: person if i == 0 else agent for i, a in enumerate(actors)}
    raise TrialogError(f"unknown mode {mode!r} (modes: {', '.join(MODES)})")


def parse_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise TrialogError(f"--modes takes a comma-separated list of {', '.join(MODES)}, got {text!r}")
    return list(dict.fromkeys(modes))


Say = Callable[[str], None]


def _say(line: str) -> None:
    print(line, flush=True)


async def run_teaming(
    settings: Settings, spec: Spec, modes: Sequence[str], trials: int, *, agent: str, person_impl: str,
    scripted: Person | None = None, max_ticks: int | None = None, seed: int | None = None, concurrency: int = 1,
    experiment: str = "teaming", say: Say = _say, trial_timeout: float | None = None,
) -> list[TeamTrial]:  # fmt: skip
    """Run ``trials`` trials of each mode and return them with their returns read from the log.
    People join by the printed links, or ``scripted`` plays every seat through the gateway."""
    from trialog.bus import connect
    from trialog.controller import Controller

    plan = [(mode, i) for mode in modes for i in range(trials)]
    pairings = {mode: mode_implementations(spec, mode, agent, person_impl) for mode in modes}
    semaphore = asyncio.Semaphore(concurrency)
    done: list[TeamTrial] = []

    async with Controller(connect(settings), name="teaming") as ctl:

        async def one(mode: str, i: int) -> None:
            implementations = pairings[mode]
            async with semaphore:
                extra: dict[str, Any] = {"implementations": implementations, "experiment": experiment}
                if max_ticks is not None:
                    extra["max_ticks"] = max_ticks
                if seed is not None:
                    extra["seed"] = seed + i
                trial_id = await ctl.start_trial(spec.name, **extra)
                where = f"{MODES[mode]} trial {i + 1}/{trials} ({trial_id})"
                links, seats = seat_players(ctl, spec, trial_id, implementations, scripted, seed=(seed or 0) + i)
                for actor, link in links.items() if scripted is None else ():
                    say(f"{where}: seat {actor}: open {link}")
                if not links:
                    say(f"{where}: agents only")
                elif scripted is not None:
                    say(f"{where}: stand-ins play {', '.join(links)} through the gateway")
                ended, *played = await asyncio.gather(ctl.wait_ended(trial_id, timeout=trial_timeout), *seats)
                sent = {p.actor: p.actions for p in played}
                by = f"; stand-ins' actions: {', '.join(f'{a} {n}' for a, n in sent.items())}" if sent else ""
                say(f"{where}: ended ({ended.reason}) at tick {ended.tick}{by}")
                done.append(TeamTrial(mode, i + 1, trial_id, implementations, ended.reason, ended.tick, sent))

        await asyncio.gather(*(one(mode, i) for mode, i in plan))
        returns = await returns_of(ctl.bus, [t.trial_id for t in done])
    order = {m: k for k, m in enumerate(modes)}
    out = [replace(t, result=returns.get(t.trial_id)) for t in done]
    return sorted(out, key=lambda t: (order[t.mode], t.index))


async def returns_of(bus, trial_ids: Sequence[str], timeout: float = 60) -> dict[str, TrialReturn]:
    """The returns of these trials, replayed from the log as ``trialog plot`` computes them.
    Waits (up to ``timeout``) for the ``trials`` index to list every one of them; a trial it
    does not list by then (one that never started) has none."""
    from trialog.controller import Controller
    from trialog.datalog.replay import read_trials

    wanted = set(trial_ids)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        indexed = {r.trial_id for r in await Controller(bus).list_trials() if r.start_offset is not None}
        if wanted <= indexed or loop.time() > deadline:
            break
        await asyncio.sleep(0.5)
    created: dict[str, int] = {}

    def select(record) -> bool:
        created[record.trial_id] = record.created_ms
        return record.trial_id in wanted

    out: dict[str, TrialReturn] = {}
    async for fold in read_trials(bus, select):
        if fold.started is not None:
            out[fold.trial_id] = trial_return(fold.started, fold.samples(), created.get(fold.trial_id, 0))
    return out


def summaries(trials: Sequence[TeamTrial], modes: Sequence[str], actor: str | None = None) -> list[ModeSummary]:
    """One summary per mode, in the order of ``modes``."""
    return [summarize(m, [t.value(actor) for t in trials if t.mode == m and t.complete]) for m in modes]


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _num(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.2f}"


def table(rows: Sequence[ModeSummary]) -> str:
    """The table by mode: trials, mean return, 95% CI of the mean, min, max."""
    head = f"{'mode':12} {'trials':>6} {'mean return':>12} {'95% CI':>21} {'min':>9} {'max':>9}"
    lines = [head]
    for r in rows:
        ci = "—" if math.isnan(r.ci_low) else f"[{r.ci_low:.2f}, {r.ci_high:.2f}]"
        lines.append(f"{r.label:12} {r.trials:>6} {_num(r.mean):>12} {ci:>21} {_num(r.min):>9} {_num(r.max):>9}")
    return "\n".join(lines)


@dataclass(frozen=True)
class TeamingFiles:
    png: Path
    csv: Path  # one row per trial
    json: Path  # the summary and the trials


def write_results(
    trials: Sequence[TeamTrial], rows: Sequence[ModeSummary], out_dir: str | Path, *, spec: str,
    actor: str | None = None, name: str = "teaming",
) -> TeamingFiles:  # fmt: skip
    """Write the plot by mode (PNG) and the data (CSV per trial, JSON with the summary)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = TeamingFiles(out / f"{name}.png", out / f"{name}.csv", out / f"{name}.json")
    whose = f"return of {actor}" if actor else "return (sum over actors)"
    with open(files.csv, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["mode", "trial", "trial_id", "pairing", "reason", "ticks", "return"])
        for t in trials:
            pairing = " + ".join(t.implementations.values())
            value = t.value(actor) if t.result is not None else ""
            writer.writerow([t.mode, t.index, t.trial_id, pairing, t.reason, t.ticks, value])
    doc = {
        "spec": spec,
        "value": whose,
        "summary": [{k: None if _nan(v) else v for k, v in asdict(r).items()} for r in rows],
        "trials": [
            {
                "mode": t.mode, "trial": t.index, "trial_id": t.trial_id, "implementations": dict(t.implementations),
                "reason": t.reason, "ticks": t.ticks, "return": t.value(actor) if t.result is not None else None,
                "returns": dict(t.result.returns) if t.result is not None else None,
                "stand_in_actions": dict(t.stand_in_actions),
            }
            for t in trials
        ],
    }  # fmt: skip
    files.json.write_text(json.dumps(doc, indent=1) + "\n")
    plot_modes(trials, rows, files.png, title=f"{spec}: {whose} by team", y_label=whose, actor=actor)
    return files


def plot_modes(
    trials: Sequence[TeamTrial], rows: Sequence[ModeSummary], png: Path, *, title: str, y_label: str,
    actor: str | None = None,
) -> None:  # fmt: skip
    """Each trial's return as a dot per mode, the mean with its 95% CI as a bar beside them."""
    from trialog.tools.plot import _figure_class

    Figure = _figure_class()
    fig = Figure(figsize=(7, 4.5), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    for x, r in enumerate(rows):
        values = [t.value(actor) for t in trials if t.mode == r.mode and t.complete]
        n = len(values)
        xs = [x - 0.12 + (0.24 * k / (n - 1) if n > 1 else 0.12) for k in range(n)]
        dots = ax.plot(xs, values, "o", alpha=0.45, label=None)[0]
        if n:
            err = None if math.isnan(r.ci_low) else [[r.mean - r.ci_low], [r.ci_high - r.mean]]
            ax.errorbar([x + 0.3], [r.mean], yerr=err, fmt="D", color=dots.get_color(), capsize=6)
    ax.set_xticks(range(len(rows)), [f"{r.label}\n(n={r.trials})" for r in rows])
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_title(title)
    ax.set_ylabel(y_label)
    ax.grid(True, axis="y", alpha=0.3)
    ax.text(
        0.01, 0.01, "dots: trials; diamond: mean with its 95% CI", transform=ax.transAxes, fontsize="small", alpha=0.7
    )
    fig.savefig(png)


def check_ended(trials: Sequence[TeamTrial]) -> list[str]:
    """The trials left out of the summary: not ended by the environment or max_ticks, or with no return."""
    return [
        f"{t.trial_id} ({MODES[t.mode]} {t.index}): {t.reason if t.result is not None else 'no return in the log'}"
        for t in trials
        if not t.complete
    ]


def print_problems(problems: Sequence[str]) -> None:
    for p in problems:
        print(f"not a complete trial: {p}", file=sys.stderr)


__all__ = [
    "MODES", "ModeSummary", "TeamTrial", "TeamingFiles", "check_ended", "mode_implementations", "parse_modes",
    "plot_modes", "returns_of", "run_teaming", "summaries", "summarize", "t975", "table", "write_results",
]  # fmt: skip
