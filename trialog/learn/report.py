"""What a training run leaves for people: ``summary.json``, the evaluation table and the plot, the same in
both modes (through the log and in-process)."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trialog.learn.train import Evaluation, Preset, TrainResult

MODES = {"log": "through Trialog", "in-process": "in-process"}  # how a table and a plot name each mode


def write_summary(out_dir: Path, preset: Preset, result: TrainResult) -> Path:
    """``summary.json``: what a run did, the same fields in both modes."""
    final = result.evaluations[-1] if result.evaluations else None
    summary = {
        "preset": preset.name,
        "preset_file": preset.file,
        "mode": result.mode,
        "implementation": preset.implementation,
        "algorithm": result.algorithm,
        "on_policy": result.on_policy,
        "wall_s": round(result.seconds, 3),
        "env_steps": result.env_steps,
        "episodes": result.episodes,
        "final_evaluation": final.mean_return if final else None,
        "best_evaluation": max((e.mean_return for e in result.evaluations), default=None),
        "evaluations": [[e.env_steps, e.mean_return] for e in result.evaluations],
        "evaluation_details": [
            {"env_steps": e.env_steps, "episodes": e.episodes, "model_version": e.model_version, "returns": e.returns}
            for e in result.evaluations
        ],
        "valid": result.valid,
        "validation": dataclasses.asdict(preset.validation) if preset.validation else None,
        "discarded": result.discarded,
        "model_version": result.model_version,
        "resumed_from": result.resumed_from,
        "schedule": dataclasses.asdict(preset.schedule),
        "seed": preset.seed,
        **result.summary_fields,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "summary.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
    return path


def table(preset: Preset, result: TrainResult) -> str:
    lines = [f"{'env steps':>10} {'episodes':>9} {'model':>6} {'eval return':>12} {'min':>7} {'max':>7}"]
    for e in result.evaluations:
        lines.append(
            f"{e.env_steps:>10,} {e.episodes:>9} {'v' + str(e.model_version):>6} {e.mean_return:>12.1f} "
            f"{min(e.returns):>7.1f} {max(e.returns):>7.1f}"
        )
    lines.append("")
    discarded = f", {result.discarded:,} transitions discarded" if result.on_policy and result.discarded else ""
    lines.append(
        f"{preset.name} ({MODES[result.mode]}): {result.env_steps:,} env steps in {result.episodes} heatup/train "
        f"trials, {result.seconds:.0f} s{discarded}"
    )
    if preset.validation is not None:
        v = preset.validation
        first = result.first_reaching(v.min_reward_threshold)
        within = f" within {v.max_episodes_to_achieve_reward} episodes" if v.max_episodes_to_achieve_reward else ""
        reached = (
            f"first reached after {first.episodes} episodes ({first.env_steps:,} steps)" if first else "never reached"
        )
        lines.append(
            f"validation: mean eval return ≥ {v.min_reward_threshold:g}{within} — {reached}: "
            f"{'PASSED' if result.valid else 'FAILED'}"
        )
    return "\n".join(lines)


def plot(preset: Preset, result: TrainResult, out: Path, extra: Mapping[str, list[tuple[float, float]]] | None = None):
    from trialog.tools.plot import plot_series

    series = {
        f"{preset.name} ({MODES[result.mode]})": [(e.env_steps, e.mean_return) for e in result.evaluations],
        **(extra or {}),
    }
    return plot_series(
        series,
        out,
        title=f"{preset.name}: evaluation return per env step",
        x_label="env steps (heatup + train)",
        y_label="mean evaluation return",
    )


class Progress:
    """The progress line of a run (a line every 5 s when not on a terminal) and a line per evaluation."""

    def __init__(self, quiet: bool):
        self.quiet, self.last_line, self.started = quiet, 0.0, time.monotonic()
        self.partial = False  # a terminal's progress line is open (no newline yet)

    def show(
        self,
        phase: str,
        steps: int,
        total: int,
        recent: list[float],
        last_eval: Evaluation | None,
        version: int,
        *,
        force: bool = False,
    ) -> None:
        if self.quiet:
            return
        width = 24
        filled = min(width, int(width * steps / max(1, total)))
        recent_text = f"recent return {sum(recent[-10:]) / len(recent[-10:]):7.1f}" if recent else "recent return     —"
        eval_text = f"last eval {last_eval.mean_return:7.1f}" if last_eval else "last eval     —"
        text = (
            f"{phase:8} [{'#' * filled}{'.' * (width - filled)}] {steps:>8,}/{total:,} steps  "
            f"{recent_text}  {eval_text}  model v{version}  {time.monotonic() - self.started:5.0f} s"
        )
        if sys.stderr.isatty():
            print(f"\r{text} ", end="", file=sys.stderr, flush=True)
            self.partial = True
        elif force or time.monotonic() - self.last_line >= 5:
            self.last_line = time.monotonic()
            print(text, file=sys.stderr, flush=True)

    def evaluated(self, e: Evaluation, total: int) -> None:
        """A line per evaluation, kept on a terminal too: env steps, mean return, elapsed."""
        if self.quiet:
            return
        if self.partial:
            print("\r\033[K", end="", file=sys.stderr)
            self.partial = False
        print(
            f"evaluation {e.env_steps:>8,}/{total:,} env steps  mean return {e.mean_return:7.1f} "
            f"(min {min(e.returns):.1f}, max {max(e.returns):.1f}, {len(e.returns)} trials)  model v{e.model_version}  "
            f"{time.monotonic() - self.started:5.0f} s",
            file=sys.stderr,
            flush=True,
        )
        self.last_line = time.monotonic()

    def done(self) -> None:
        if self.partial:  # end the progress line
            print(file=sys.stderr)
            self.partial = False
