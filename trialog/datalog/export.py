"""Export: many trials as one Parquet dataset, one row per (trial, tick, actor).

Rows follow :mod:`trialog.datalog.table` (the archive's own layout), so the same
queries work on an export and on the archive's trial files. Trials come either
from the topics (the ``trials`` index picks them, replay reads them) or from an
archive folder (its catalog picks them; corrections applied).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trialog.bus.base import Bus
from trialog.datalog.archive import Archive
from trialog.datalog.replay import read_trials
from trialog.datalog.table import SCHEMA, to_table


@dataclass(frozen=True)
class Filters:
    """Which trials (and rows) go into an export; ``None`` means any."""

    spec: str | None = None
    implementation: str | None = None  # rows of actors played by this implementation
    since_ms: int | None = None  # trial start time, inclusive
    until_ms: int | None = None  # trial start time, exclusive
    status: str | None = (
        None  # ended, running, …: the log's when the index lags it; archived trials are ended or unended
    )

    def trial(self, spec: str, started_ms: int, status: str, implementations: list[str]) -> bool:
        return (
            (self.spec is None or spec == self.spec)
            and (self.since_ms is None or started_ms >= self.since_ms)
            and (self.until_ms is None or started_ms < self.until_ms)
            and (self.status is None or status == self.status)
            and (self.implementation is None or self.implementation in implementations)
        )

    def rows(self, table: pa.Table) -> pa.Table:
        if self.implementation is None:
            return table
        return table.filter(pc.equal(table["implementation"], self.implementation))


@dataclass
class Summary:
    trials: int = 0
    rows: int = 0
    problems: dict[str, list[str]] = field(default_factory=dict)  # trial → problems found


class _Writer:
    """Streams tables into a Parquet file that appears whole (temp + rename) when closed."""

    def __init__(self, out: str | Path):
        self.out = Path(out)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.out.with_name(f".{self.out.name}.tmp-{os.getpid()}")
        self.writer = pq.ParquetWriter(self.tmp, SCHEMA)

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            self.writer.write_table(table)

    def close(self) -> None:
        self.writer.close()
        os.replace(self.tmp, self.out)

    def abort(self) -> None:
        self.writer.close()
        self.tmp.unlink(missing_ok=True)


async def export_from_topic(bus: Bus, out: str | Path, filters: Filters = Filters()) -> Summary:
    """Export the trials of the ``trials`` index that pass ``filters``, reading each
    ``events`` partition once, from its oldest selected trial to its end. A trial's
    status is the log's when the index has not caught up with it."""
    summary = Summary()
    writer = _Writer(out)
    indexed: dict[str, str] = {}  # trial → its status in the index

    def select(record) -> bool:
        indexed[record.trial_id] = record.status
        # The index says a trial ended a moment after the log does (the orchestrator indexes
        # the trial.ended it reads), so a trial it still calls running is read too when ended
        # ones are asked for: its own log says which it is.
        status = "ended" if filters.status == "ended" and record.status == "running" else record.status
        return filters.trial(record.spec, record.created_ms, status, list(record.implementations.values()))

    try:
        async for fold in read_trials(bus, select):
            status = "ended" if fold.ended is not None else indexed[fold.trial_id]
            if filters.status is not None and status != filters.status:
                continue
            if problems := fold.check():
                summary.problems[fold.trial_id] = problems
            if fold.started is None:
                continue
            table = filters.rows(to_table(fold.samples(), fold.started, fold.ended))
            writer.write(table)
            summary.trials += 1
            summary.rows += table.num_rows
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return summary


def export_from_archive(archive: Archive, out: str | Path, filters: Filters = Filters()) -> Summary:
    summary = Summary()
    writer = _Writer(out)
    try:
        for tid, entry in sorted(archive.catalog().items(), key=lambda item: (item[1].get("started_ms", 0), item[0])):
            impls = [a["implementation"] for a in entry["actors"]]
            if not filters.trial(entry["spec"], entry.get("started_ms", 0), entry["status"], impls):
                continue
            trial = archive.read(tid)
            table = filters.rows(to_table(trial.samples, trial.started, trial.ended))
            writer.write(table)
            summary.trials += 1
            summary.rows += table.num_rows
            if entry["problems"]:
                summary.problems[tid] = entry["problems"]
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return summary
