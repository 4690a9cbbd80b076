"""Training curves while a run goes: TensorBoard event files, written with tensorboardX
(pure Python: no TensorFlow), flushed every few seconds so that a TensorBoard pointed at
the folder follows the run.

Two writers, one folder each, the same in both modes of ``trialog train``:

- the run's (``OUT/tensorboard``): ``train/return`` and ``train/model_version`` per
  heatup and train trial, ``train/env_steps_per_s`` every 2 s and before each evaluation,
  ``evaluate/mean_return`` (with ``min_return``, ``max_return``) per evaluation, all
  against the env steps so far;
- the learner's (``OUT/tensorboard/learner``, written by the learner service through the
  log, by the in-process loop otherwise): per version published, the last round's
  ``learner/loss`` and value estimates (DQN ``learner/q_mean``; PPO ``learner/value_mean``,
  its policy and value losses, entropy), ``learner/model_version`` and, on-policy,
  ``learner/discarded``, against the env steps the learner has seen.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trialog.errors import TrialogError

FLUSH_S = 5  # how stale the files may be behind the run
RATE_EVERY_S = 2.0  # env steps/s measured over at least this long
LEARNER = "learner"  # the learner's folder inside the run's


class Curves:
    """One TensorBoard event-file writer into ``log_dir``."""

    def __init__(self, log_dir: str | Path) -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise TrialogError("TensorBoard curves need tensorboardX: pip install 'trialog[learn]'") from None
        self.log_dir = Path(log_dir)
        self.writer = SummaryWriter(str(self.log_dir), flush_secs=FLUSH_S)
        # (time, env steps) of the trial end the rate is measured from, and of the last one
        self.rate_from: tuple[float, int] | None = None
        self.rate_to: tuple[float, int] = (0.0, 0)

    def scalars(self, group: str, values: Mapping[str, float], step: int) -> None:
        for name, value in values.items():
            self.writer.add_scalar(f"{group}/{name}", float(value), int(step))

    def trial_ended(self, env_steps: int, trial_return: float, version: int) -> None:
        """A heatup or train trial ended: its return, the model version, the env steps' rate."""
        self.scalars("train", {"return": trial_return, "model_version": version}, env_steps)
        now = time.monotonic()
        self.rate_to = (now, env_steps)
        if self.rate_from is None:
            self.rate_from = self.rate_to
        elif now - self.rate_from[0] >= RATE_EVERY_S:
            self._rate()

    def evaluated(self, evaluation: Any) -> None:
        """An evaluation (:class:`trialog.learn.train.Evaluation`); the rate up to the trials before it."""
        e = evaluation
        values = {"mean_return": e.mean_return, "min_return": min(e.returns), "max_return": max(e.returns)}
        self.scalars("evaluate", values, e.env_steps)
        if self.rate_from is not None and self.rate_to[0] > self.rate_from[0]:
            self._rate()
        self.rate_from = None  # the pause for evaluation trials is no env steps' rate

    def _rate(self) -> None:
        (since, steps), (now, env_steps) = self.rate_from, self.rate_to
        self.scalars("train", {"env_steps_per_s": (env_steps - steps) / (now - since)}, env_steps)
        self.rate_from = self.rate_to

    def published(self, learner: Any, version: int, discarded: int = 0) -> None:
        """A learner published a version: its last round's figures."""
        values = {**getattr(learner, "round_scalars", {}), "model_version": version}
        if getattr(learner, "on_policy", False):
            values["discarded"] = discarded
        self.scalars(LEARNER, values, learner.env_steps)

    def close(self) -> None:
        self.writer.close()


def learner_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / LEARNER
