"""The archive on disk: one Parquet file per trial, a catalog, and reward corrections.

Layout of an archive folder (see ``docs/datalog.md``)::

    catalog.jsonl                          one JSON line per archived trial
    trials/<trial>.parquet                 the trial's samples (rows of trialog.datalog.table)
    corrections/<trial>/<offset>.parquet   rewards logged after the trial was archived

``<trial>`` is the trial ID, percent-encoded when it has characters unsafe in
file names. Trial files carry the encoded ``trial.started`` and ``trial.ended``
in their Parquet metadata, so a file alone is enough to decode its payloads and
to re-simulate the trial.

Writes are atomic (temporary file + rename) and idempotent: the catalog line is
the commit point — a trial is archived once its line is in the catalog; writing
it again before that replaces the file. Corrections are append-only: each file
holds late rewards named by the log offset of the first one; offsets already in
some correction file are never written twice.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from trialog.datalog.samples import RewardSource, Sample, TrialFold, apply_rewards
from trialog.datalog.table import from_table, to_table
from trialog.errors import TrialogError
from trialog.protocol.codec import SchemaStore
from trialog.protocol.event_codec import EventCodec
from trialog.protocol.events import Reward, TrialEnded, TrialStarted
from trialog.protocol.owners import reward_problem

CATALOG = "catalog.jsonl"
META_STARTED = b"trialog.trial_started"
META_ENDED = b"trialog.trial_ended"

CORRECTION_SCHEMA = pa.schema(
    [
        ("offset", pa.int64()),
        ("tick", pa.int64()),
        ("sender", pa.string()),
        ("receiver", pa.string()),
        ("value", pa.float64()),
        ("confidence", pa.float64()),
        ("user_data", pa.string()),
    ]
)


@dataclass
class ArchivedTrial:
    entry: dict[str, Any]
    started: TrialStarted
    ended: TrialEnded | None
    samples: list[Sample]  # corrections applied


def file_name(trial_id: str) -> str:
    """A file name for a trial ID (percent-encoded; never hidden, never ``.``/``..``)."""
    name = urllib.parse.quote(trial_id, safe="-_.")
    return "%2E" + name[1:] if name.startswith(".") else name


class Archive:
    """An archive folder (created on first write)."""

    def __init__(self, root: str | Path, store: SchemaStore | None = None):
        self.root = Path(root)
        self.codec = EventCodec(store)
        self._catalog: dict[str, dict[str, Any]] | None = None
        self._corrected: dict[str, set[int]] = {}

    @property
    def store(self) -> SchemaStore:
        return self.codec.store

    # --- catalog -----------------------------------------------------------------------
    def catalog(self) -> dict[str, dict[str, Any]]:
        """Trial ID → catalog entry, for every archived trial."""
        if self._catalog is None:
            self._catalog = {}
            path = self.root / CATALOG
            if path.exists():
                for line in path.read_text().splitlines():
                    try:
                        entry = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line cut short by a crash: its trial was not committed
                    self._catalog[entry["trial_id"]] = entry
        return self._catalog

    def refresh(self) -> None:
        """Forget what was read from disk: other logger instances may have written since."""
        self._catalog = None
        self._corrected.clear()

    def entry(self, trial_id: str) -> dict[str, Any] | None:
        return self.catalog().get(trial_id)

    # --- writing ----------------------------------------------------------------------------
    def write_trial(
        self, fold: TrialFold, *, partition: int, start_offset: int, cut_offset: int, started_ms: int, ended_ms: int
    ) -> dict[str, Any]:
        """Archive a trial's samples as of log position ``cut_offset`` (rewards at or after it
        become corrections). Returns the catalog entry; a trial already in the catalog is
        left as it is."""
        existing = self.entry(fold.trial_id)
        if existing is not None:
            return existing
        if fold.started is None:
            raise TrialogError(f"trial {fold.trial_id} cannot be archived without its trial.started")
        samples = fold.samples()
        table = to_table(samples, fold.started, fold.ended)
        meta = {META_STARTED: base64.b64encode(self.codec.encode(fold.started))}
        if fold.ended is not None:
            meta[META_ENDED] = base64.b64encode(self.codec.encode(fold.ended))
        table = table.replace_schema_metadata(meta)
        rel = f"trials/{file_name(fold.trial_id)}.parquet"
        _atomic_parquet(table, self.root / rel)
        started = fold.started
        entry = {
            "trial_id": fold.trial_id,
            "file": rel,
            "spec": started.spec,
            "environment": started.environment,
            "seed": started.seed,
            "experiment": started.experiment,
            "phase": started.phase,
            "actors": [
                {"name": a.name, "class": a.actor_class, "implementation": a.implementation} for a in started.actors
            ],
            "status": "ended" if fold.ended is not None else "unended",
            "reason": fold.ended.reason if fold.ended is not None else None,
            "ticks": fold.ended.tick if fold.ended is not None else max((s.tick for s in samples), default=0),
            "samples": len(samples),
            "partition": partition,
            "start_offset": start_offset,
            "cut_offset": cut_offset,
            "started_ms": started_ms,
            "ended_ms": ended_ms,
            "problems": fold.check(),
            "parameter_changes": [
                [tick, parameters] for tick, parameters in fold.parameter_changes
            ],  # for replay --verify
        }
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / CATALOG, "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.catalog()[fold.trial_id] = entry
        return entry

    def corrected_offsets(self, trial_id: str) -> set[int]:
        """Log offsets of the late rewards already in this trial's corrections."""
        if trial_id not in self._corrected:
            offsets: set[int] = set()
            for path in self._correction_files(trial_id):
                offsets.update(pq.read_table(path, columns=["offset"]).column("offset").to_pylist())
            self._corrected[trial_id] = offsets
        return self._corrected[trial_id]

    def write_correction(self, trial_id: str, rewards: Iterable[tuple[int, Reward]]) -> Path | None:
        """Append late rewards (log offset, reward) of an archived trial; those already
        written are skipped. Returns the new file, if any."""
        done = self.corrected_offsets(trial_id)
        fresh = sorted({o: r for o, r in rewards if o not in done}.items())
        if not fresh:
            return None
        table = pa.Table.from_pylist(
            [{"offset": o, "tick": r.tick, "sender": r.sender, "receiver": r.receiver, "value": r.value,
              "confidence": r.confidence, "user_data": r.user_data} for o, r in fresh],
            schema=CORRECTION_SCHEMA,
        )  # fmt: skip
        path = self.root / "corrections" / file_name(trial_id) / f"{fresh[0][0]:020d}.parquet"
        _atomic_parquet(table, path)
        done.update(o for o, _ in fresh)
        return path

    # --- reading ------------------------------------------------------------------------------
    def _correction_files(self, trial_id: str) -> list[Path]:
        folder = self.root / "corrections" / file_name(trial_id)
        return sorted(folder.glob("*.parquet")) if folder.is_dir() else []

    def corrections(self, trial_id: str) -> list[tuple[int, int, RewardSource]]:
        """(offset, tick, reward) of every correction of a trial, in log order."""
        out = []
        for path in self._correction_files(trial_id):
            for row in pq.read_table(path).to_pylist():
                out.append(
                    (
                        row["offset"],
                        row["tick"],
                        RewardSource(row["sender"], row["receiver"], row["value"], row["confidence"], row["user_data"]),
                    )
                )
        return sorted(out, key=lambda item: item[0])

    def counted_corrections(
        self, trial_id: str, started: TrialStarted, ended: TrialEnded | None, samples: list[Sample]
    ) -> list[tuple[int, RewardSource]]:
        """(tick, reward) of the corrections that count: those that pass the orchestrator's
        rules for a reward of the trial after its end (:func:`trialog.protocol.owners.reward_problem`),
        as the fold judges a late reward; the others were dead-lettered."""
        last = ended.tick if ended is not None else max((s.tick for s in samples), default=-1)
        actors = {a.name: a.actor_class for a in started.actors}
        return [
            (tick, r)
            for _, tick, r in self.corrections(trial_id)
            if reward_problem(
                Reward(
                    trial_id,
                    tick=tick,
                    receiver=r.receiver,
                    value=r.value,
                    confidence=r.confidence,
                    sender=r.sender,
                    user_data=r.user_data,
                ),
                last,
                actors,
            )
            is None
        ]

    def read(self, trial_id: str) -> ArchivedTrial:
        """An archived trial with its corrections applied."""
        entry = self.entry(trial_id)
        if entry is None:
            raise TrialogError(f"trial {trial_id} is not in the archive at {self.root}")
        table = pq.read_table(self.root / entry["file"])
        meta = table.schema.metadata or {}
        started = self.codec.decode(base64.b64decode(meta[META_STARTED]), TrialStarted.KIND)
        ended = self.codec.decode(base64.b64decode(meta[META_ENDED]), TrialEnded.KIND) if META_ENDED in meta else None
        samples = from_table(table, started, self.store)
        samples = apply_rewards(samples, self.counted_corrections(trial_id, started, ended, samples))
        return ArchivedTrial(entry, started, ended, samples)


def _atomic_parquet(table: pa.Table, path: Path) -> None:
    """Write ``path`` so that readers see the old file or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    pq.write_table(table, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
