"""Samples as Arrow tables and back: the one row layout of the archive and of exports.

One row per (trial, tick, actor). Payloads appear twice: ``observation``/``action``
as JSON text (readable from pandas, polars, DuckDB without any Avro library;
tensors become nested lists) and ``observation_avro``/``action_avro`` as the exact
logged bytes (Avro single-object encoding, lossless, dtypes kept; decode with the
actor class schemas of the trial). Rows go back to :class:`Sample` with the
trial's ``trial.started`` (kept in the archive file's metadata).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from trialog.datalog.samples import MessageIn, RewardSource, Sample, to_json_text
from trialog.errors import CodecError
from trialog.protocol.codec import SchemaStore
from trialog.protocol.events import TrialEnded, TrialStarted
from trialog.protocol.trial import class_schemas

REWARD_SOURCE = pa.struct(
    [
        ("sender", pa.string()),
        ("receiver", pa.string()),
        ("value", pa.float64()),
        ("confidence", pa.float64()),
        ("user_data", pa.string()),
    ]
)
MESSAGE = pa.struct(
    [
        ("sender", pa.string()),
        ("receivers", pa.list_(pa.string())),
        ("message_id", pa.string()),
        ("payload", pa.string()),
    ]
)

SCHEMA = pa.schema(
    [
        ("trial_id", pa.string()),
        ("spec", pa.string()),
        ("environment", pa.string()),
        ("seed", pa.int64()),
        ("experiment", pa.string()),
        ("phase", pa.string()),
        ("end_reason", pa.string()),
        ("tick", pa.int64()),
        ("actor", pa.string()),
        ("actor_class", pa.string()),
        ("implementation", pa.string()),
        ("observation", pa.string()),
        ("action", pa.string()),
        ("reward", pa.float64()),
        ("reward_sources", pa.list_(REWARD_SOURCE)),
        ("messages", pa.list_(MESSAGE)),
        ("terminated", pa.bool_()),
        ("truncated", pa.bool_()),
        ("final", pa.bool_()),
        ("timed_out", pa.bool_()),
        ("policy_version", pa.int64()),
        ("observation_avro", pa.binary()),
        ("action_avro", pa.binary()),
    ]
)


def to_table(samples: Iterable[Sample], started: TrialStarted, ended: TrialEnded | None) -> pa.Table:
    """The rows of one trial."""
    rows: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    for s in samples:
        row = {
            **s.to_json(),
            "spec": started.spec,
            "environment": started.environment,
            "seed": started.seed,
            "experiment": started.experiment,
            "phase": started.phase,
            "end_reason": ended.reason if ended is not None else None,
            # Payloads twice: JSON text for any tool, the exact Avro bytes for a faithful reload.
            "observation": to_json_text(s.observation),
            "action": None if s.action_avro is None else to_json_text(s.action),
            "observation_avro": s.observation_avro,
            "action_avro": s.action_avro,
        }
        for name in SCHEMA.names:
            rows[name].append(row[name])
    return pa.Table.from_pydict(rows, schema=SCHEMA)


def from_table(table: pa.Table, started: TrialStarted, store: SchemaStore) -> list[Sample]:
    """The samples of one trial's rows, payloads decoded with the trial's class schemas."""
    schemas = class_schemas(store, started)
    out = []
    for row in table.to_pylist():
        cs = schemas[row["actor_class"]]
        out.append(
            Sample(
                trial_id=row["trial_id"],
                tick=row["tick"],
                actor=row["actor"],
                actor_class=row["actor_class"],
                implementation=row["implementation"],
                observation_avro=row["observation_avro"],
                action_avro=row["action_avro"],
                reward=row["reward"],
                reward_sources=tuple(RewardSource(**r) for r in row["reward_sources"]),
                messages=tuple(
                    MessageIn(m["sender"], tuple(m["receivers"]), m["message_id"], m["payload"])
                    for m in row["messages"]
                ),
                terminated=row["terminated"],
                truncated=row["truncated"],
                final=row["final"],
                timed_out=row["timed_out"],
                policy_version=row.get("policy_version"),  # absent from archives written before it existed
                observation=_decode(store, row["observation_avro"], cs.observation),
                action=None if row["action_avro"] is None else _decode(store, row["action_avro"], cs.action),
            )
        )
    return out


def _decode(store: SchemaStore, payload: bytes, schema: Any) -> Any:
    try:
        return store.decode(payload, schema)
    except CodecError:
        return None  # the fold reported it when the trial was archived
