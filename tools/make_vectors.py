"""Generate Trialog's language-neutral test vectors into ``schemas/vectors/``.

Every vector is the exact bytes the Python codec writes (``<name>.bin``) and an
entry of ``manifest.json`` that says, without any Python, what those bytes mean:
the writer schema (the codec's self-contained ``Schema.json``), its parsing
canonical form and fingerprint as the codec computed them, and the expected
decoded value as JSON.
Another language's Avro library must agree with all of it (``interop/java``).

    python tools/make_vectors.py [--out DIR]

The output is deterministic: running it again gives identical files, so CI can
regenerate and compare (``.ci/interop.sh``). The JSON conventions for expected
values are written into the manifest itself (``conventions``) and docs/interop.md.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout, installed or not
    sys.path.insert(0, str(ROOT))

from trialog.protocol import events as ev  # noqa: E402
from trialog.protocol.codec import SUPPORTED_DTYPES, TENSOR, Schema, SchemaStore, record_to_tensor  # noqa: E402
from trialog.protocol.event_codec import EventCodec  # noqa: E402

FORMAT = "trialog-vectors/1"
CONVENTIONS = {
    "record": "JSON object with every field of the schema, in schema order",
    "int, long": "JSON integer",
    "float, double": "JSON number, the exact value (a float's value is that of the 32-bit float); "
    'non-finite values are the strings "NaN", "Infinity", "-Infinity"',
    "bytes, fixed": "base64 string (RFC 4648, standard alphabet, padded)",
    "enum, string": "JSON string",
    "union": 'null for the null branch, otherwise {"<branch>": value} as in Avro\'s JSON encoding: '
    "the branch is a primitive type name, a named type's full name, or array/map",
    "trialog.Tensor": "{dtype, shape, data (base64 of the C-order little-endian element bytes)} plus "
    "values: the elements as a nested list of the shape (bool as true/false, complex as [real, imag], "
    "non-finite floats as strings as above); values is for reading, data is the truth",
    "fingerprint": "hex of the 8 header bytes as they are on the wire (CRC-64-AVRO, little-endian)",
    "kafka": "the record key (UTF-8) and headers a Trialog producer writes with the event",
}

NAMED = {"record", "error", "enum", "fixed"}


# --- schemas as JSON ---------------------------------------------------------------------

_KEY_ORDER = ("name", "type", "namespace", "aliases", "doc", "symbols", "size", "items", "values", "fields", "default")


def tidy(schema: Any) -> Any:
    """A schema with its keys in one fixed order (the codec's JSON may list them in any
    order from run to run; the vectors must not change when nothing changed)."""
    if isinstance(schema, list):
        return [tidy(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    keys = [k for k in _KEY_ORDER if k in schema] + sorted(k for k in schema if k not in _KEY_ORDER)
    # default values are data, not schemas: leave them as they are
    return {k: schema[k] if k == "default" else tidy(schema[k]) for k in keys}


def _resolve(schema: Any, named: Mapping[str, Any]) -> Any:
    return named[schema] if isinstance(schema, str) and schema in named else schema


def branch_name(schema: Any) -> str:
    """A union branch's name in Avro's JSON encoding."""
    if isinstance(schema, str):
        return schema
    return schema["name"] if schema["type"] in NAMED else schema["type"]


# --- values as JSON ----------------------------------------------------------------------


def _number(x: float) -> float | str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def _b64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def tensor_values(arr: np.ndarray) -> Any:
    """The elements of an array as a nested list, in the manifest's JSON conventions."""

    def leaf(x: Any) -> Any:
        if isinstance(x, bool):
            return x
        if isinstance(x, complex):
            return [_number(x.real), _number(x.imag)]
        if isinstance(x, float):
            return _number(x)
        return x

    def walk(x: Any) -> Any:
        return [walk(v) for v in x] if isinstance(x, list) else leaf(x)

    return walk(arr.tolist())


def _matches(schema: Any, value: Any, named: Mapping[str, Any]) -> bool:
    """Whether a Python value belongs to one union branch (first match wins, as in fastavro)."""
    schema = _resolve(schema, named)
    kind = schema if isinstance(schema, str) else schema["type"]
    if isinstance(schema, dict) and schema.get("name") == TENSOR:
        return isinstance(value, np.ndarray) or (isinstance(value, dict) and set(value) == {"dtype", "shape", "data"})
    match kind:
        case "null":
            return value is None
        case "boolean":
            return isinstance(value, bool)
        case "int":
            return isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31
        case "long":
            return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
        case "float" | "double":
            return isinstance(value, float)
        case "string":
            return isinstance(value, str)
        case "enum":
            return isinstance(value, str) and value in schema["symbols"]
        case "bytes":
            return isinstance(value, bytes)
        case "fixed":
            return isinstance(value, bytes) and len(value) == schema["size"]
        case "array":
            return isinstance(value, (list, tuple))
        case "map":
            return isinstance(value, Mapping) and all(_matches(schema["values"], v, named) for v in value.values())
        case "record" | "error":
            names = {f["name"] for f in schema["fields"]}
            required = {f["name"] for f in schema["fields"] if "default" not in f}
            return isinstance(value, Mapping) and set(value) <= names and required <= set(value)
    return False


def to_json(schema: Any, value: Any, named: Mapping[str, Any]) -> Any:
    """A Python value (as given to or returned by the codec) as the manifest's expected JSON."""
    schema = _resolve(schema, named)
    if isinstance(schema, list):
        for branch in schema:
            if _matches(branch, value, named):
                if value is None:
                    return None
                return {branch_name(_resolve(branch, named)): to_json(branch, value, named)}
        raise ValueError(f"{value!r} matches no branch of {schema}")
    kind = schema if isinstance(schema, str) else schema["type"]
    if isinstance(schema, dict) and schema.get("name") == TENSOR:
        if isinstance(value, dict):  # a raw Tensor record
            value = record_to_tensor(value)
        arr = np.asarray(value)
        data = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
        return {"dtype": arr.dtype.name, "shape": list(arr.shape), "data": _b64(data), "values": tensor_values(arr)}
    match kind:
        case "null" | "boolean" | "string" | "enum":
            return value
        case "int" | "long":
            return int(value)
        case "float":
            return _number(float(np.float32(value)))
        case "double":
            return _number(float(value))
        case "bytes" | "fixed":
            return _b64(value)
        case "array":
            return [to_json(schema["items"], v, named) for v in value]
        case "map":
            return {k: to_json(schema["values"], v, named) for k, v in value.items()}
        case "record" | "error":
            return {f["name"]: to_json(f["type"], _field(value, f), named) for f in schema["fields"]}
    if isinstance(kind, (str, dict, list)):  # {"type": <schema>} wrapper
        return to_json(kind, value, named)
    raise ValueError(f"unsupported schema {schema!r}")


def _field(record: Mapping[str, Any], field: Mapping[str, Any]) -> Any:
    if field["name"] in record:
        return record[field["name"]]
    if "default" in field:
        return field["default"]
    raise ValueError(f"field {field['name']} is missing and has no default")


def event_record(event: Any) -> dict[str, Any]:
    """An event as the record dict the codec writes (nested specs as dicts, tuples as lists)."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        if isinstance(v, Mapping):
            return {k: plain(x) for k, x in v.items()}
        return v

    return {f.name: plain(getattr(event, f.name)) for f in dataclasses.fields(event)}


# --- the vectors -------------------------------------------------------------------------

TRIAL = "t-20250101-0001"
TEXT = "Grüße, 世界! 😀 naïve café — שלום, e\u0301, tab\there, nul\u0000end"

# A user's observation schema full of tensors: one field per supported dtype, plus tensors
# inside a union, an array and a map. The same schema serves three vectors (arrays,
# 0-d scalars, empty arrays) so that every dtype is seen in every shape class.
TENSOR_ZOO = {
    "type": "record",
    "name": "TensorZoo",
    "namespace": "demo.vectors",
    "doc": "Every dtype a trialog.Tensor carries.",
    "fields": [{"name": f"t_{d}", "type": TENSOR} for d in SUPPORTED_DTYPES]
    + [
        {"name": "maybe", "type": ["null", TENSOR], "default": None},
        {"name": "frames", "type": {"type": "array", "items": TENSOR}},
        {"name": "by_name", "type": {"type": "map", "values": TENSOR}},
    ],
}

# A user's observation schema with the rest of Avro: nested and recursive records in
# other namespaces, enums, fixed, unions of every kind of branch, maps, arrays. (In a
# union, the enum comes before string: a writer picks the first branch a value fits.)
AGENT_OBSERVATION = {
    "type": "record",
    "name": "AgentObservation",
    "namespace": "demo.grid",
    "fields": [
        {"name": "text", "type": "string"},
        {"name": "flag", "type": "boolean"},
        {"name": "i32", "type": "int"},
        {"name": "i64", "type": "long"},
        {"name": "f32", "type": "float"},
        {"name": "f64", "type": "double"},
        {"name": "raw", "type": "bytes"},
        {"name": "nothing", "type": "null"},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "heading", "type": {"type": "enum", "name": "Heading", "symbols": ["NORTH", "EAST", "SOUTH", "WEST"]}},
        {
            "name": "position",
            "type": {
                "type": "record",
                "name": "Position",
                "fields": [
                    {"name": "x", "type": "int"},
                    {"name": "y", "type": "int"},
                    {"name": "label", "type": ["null", "string"], "default": None},
                ],
            },
        },
        {"name": "path", "type": {"type": "array", "items": "Position"}},
        {"name": "inventory", "type": {"type": "map", "values": "long"}},
        {"name": "neighbours", "type": {"type": "map", "values": {"type": "array", "items": "string"}}},
        {
            "name": "mixed",
            "type": {
                "type": "array",
                "items": [
                    "null",
                    "boolean",
                    "long",
                    "double",
                    "Heading",
                    "string",
                    "bytes",
                    "Position",
                    {"type": "array", "items": "string"},
                    {"type": "map", "values": "long"},
                ],
            },
        },
        {
            "name": "log",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Entry",
                    "namespace": "demo.log",
                    "fields": [
                        {"name": "at", "type": "long"},
                        {"name": "what", "type": ["string", "bytes", "null"]},
                        {"name": "meta", "type": {"type": "map", "values": ["null", "double", "string"]}},
                    ],
                },
            },
        },
        {
            "name": "chain",
            "type": {
                "type": "record",
                "name": "Node",
                "fields": [{"name": "value", "type": "int"}, {"name": "next", "type": ["null", "Node"]}],
            },
        },
        {"name": "frame", "type": ["null", TENSOR], "default": None},
        {"name": "matrix", "type": {"type": "array", "items": {"type": "array", "items": "double"}}},
    ],
}

MOVE = {
    "type": "record",
    "name": "Move",
    "namespace": "demo.grid",
    "fields": [
        {"name": "dx", "type": "int"},
        {"name": "dy", "type": "int"},
        {"name": "say", "type": ["null", "string"], "default": None},
    ],
}

# Schema evolution: v2 reorders, promotes int -> long and float -> double, drops a field
# and adds fields with defaults of every shape; a v1 record must read as v2.
SETTINGS_V1 = {
    "type": "record",
    "name": "Settings",
    "namespace": "demo.evolution",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "level", "type": "int"},
        {"name": "gain", "type": "float"},
        {"name": "legacy", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
SETTINGS_V2 = {
    "type": "record",
    "name": "Settings",
    "namespace": "demo.evolution",
    "fields": [
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "name", "type": "string"},
        {"name": "level", "type": "long"},
        {"name": "gain", "type": "double"},
        {"name": "mode", "type": "string", "default": "automatique"},
        {"name": "limit", "type": ["null", "long"], "default": None},
        {"name": "ratio", "type": "double", "default": 0.5},
        {"name": "enabled", "type": "boolean", "default": True},
        {"name": "extra", "type": {"type": "map", "values": "string"}, "default": {"ünïcode": "ok"}},
        {"name": "weights", "type": {"type": "array", "items": "int"}, "default": [1, 2, 3]},
        {
            "name": "origin",
            "type": {
                "type": "record",
                "name": "Point",
                "fields": [{"name": "x", "type": "int"}, {"name": "y", "type": "int"}],
            },
            "default": {"x": -1, "y": 7},
        },
    ],
}


def _edge_tensors() -> dict[str, np.ndarray]:
    """One multi-dimensional array per dtype, reaching for each dtype's edges."""
    out = {
        "bool": np.array([[True, False, True], [False, False, True]]),
        "float16": np.array([[0.0, -0.0, 1.0, -2.5], [65504.0, 2.0**-24, np.inf, np.nan]], dtype="float16"),
        "float32": np.array(
            [[[0.1, -0.0], [3.4028235e38, 1e-45]], [[np.inf, -np.inf], [np.nan, -1.5]]], dtype="float32"
        ),
        "float64": np.array(
            [[[0.1, -0.0], [1.7976931348623157e308, 5e-324]], [[np.inf, -np.inf], [np.nan, math.pi]]], dtype="float64"
        ),
        "complex64": np.array([[1 + 2j, -0.5 + 0.25j], [0j, 3.4028235e38 - 1e-45j]], dtype="complex64"),
        "complex128": np.array([[1 + 2j, -0.5 + 0.25j], [complex(0.1, -0.0), 1e308 + 5e-324j]], dtype="complex128"),
    }
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        info = np.iinfo(name)
        mid = 2**53 + 1 if info.bits == 64 else 1  # 2**53 + 1: exact as an integer, not as a double
        values = [info.min, info.max, 0, 1, mid, info.max // 3]
        out[name] = np.array(values, dtype=name).reshape(2, 3)
    out["int64"] = out["int64"].reshape(3, 2)  # a different shape, so rows and columns can't be swapped unseen
    out["uint8"] = out["uint8"].reshape(1, 2, 3)
    return out


def _zoo(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    value: dict[str, Any] = {f"t_{d}": arrays[d] for d in SUPPORTED_DTYPES}
    value["maybe"] = None
    value["frames"] = []
    value["by_name"] = {}
    return value


def payload_values() -> dict[str, tuple[dict, dict[str, Any]]]:
    arrays = _edge_tensors()
    scalars = {d: np.array(a.reshape(-1)[1], dtype=d) for d, a in arrays.items()}  # 0-d
    empties = {d: np.zeros([(0,), (2, 0), (0, 3, 1)][i % 3], dtype=d) for i, d in enumerate(SUPPORTED_DTYPES)}
    zoo_arrays = _zoo(arrays) | {
        "maybe": np.arange(6, dtype="float32").reshape(2, 3) / 4,
        "frames": [np.arange(4, dtype="int64"), np.array(7.25), np.zeros((0, 2), dtype="uint8")],
        "by_name": {"rgb": np.arange(12, dtype="uint8").reshape(2, 2, 3), "ζ": np.array([True])},
    }
    agent = {
        "text": TEXT,
        "flag": True,
        "i32": -(2**31),
        "i64": 2**63 - 1,
        "f32": 0.1,
        "f64": -0.0,
        "raw": bytes(range(256)),
        "nothing": None,
        "digest": b"\xc3\x01\x00\xff",
        "heading": "WEST",
        "position": {"x": 3, "y": -4, "label": "départ"},
        "path": [{"x": 0, "y": 0, "label": None}, {"x": 2**31 - 1, "y": -(2**31), "label": "∞"}],
        "inventory": {"gold": -(2**63), "ключ": 42, "": 0},
        "neighbours": {"north": ["ann", "李"], "south": []},
        "mixed": [None, True, -7, 2.5, "ünï", b"\x00\xff", {"x": 1, "y": 2, "label": None}, "EAST", ["a"], {"k": 1}],
        "log": [
            {"at": 1, "what": "start", "meta": {"score": 1e-300, "note": "ok", "none": None}},
            {"at": 2, "what": b"\xde\xad", "meta": {}},
            {"at": 3, "what": None, "meta": {"nan": float("nan"), "big": 1.7976931348623157e308}},
        ],
        "chain": {"value": 1, "next": {"value": 2, "next": {"value": 3, "next": None}}},
        "frame": np.array([[1, -2], [3, -4]], dtype="int16"),
        "matrix": [[1.0, 0.0], [], [-1e-10, 2.0**60]],
    }
    agent_minimal = {
        "text": "",
        "flag": False,
        "i32": 0,
        "i64": -1,
        "f32": -3.4028234663852886e38,
        "f64": float("inf"),
        "raw": b"",
        "nothing": None,
        "digest": b"\x00\x00\x00\x00",
        "heading": "NORTH",
        "position": {"x": 0, "y": 0, "label": None},  # (the codec wants every field, defaults or not)
        "path": [],
        "inventory": {},
        "neighbours": {},
        "mixed": [],
        "log": [],
        "chain": {"value": 0, "next": None},
        "frame": None,
        "matrix": [],
    }
    return {
        "payload.tensors.arrays": (TENSOR_ZOO, zoo_arrays),
        "payload.tensors.scalars": (TENSOR_ZOO, _zoo(scalars)),
        "payload.tensors.empty": (TENSOR_ZOO, _zoo(empties)),
        "payload.observation.full": (AGENT_OBSERVATION, agent),
        "payload.observation.minimal": (AGENT_OBSERVATION, agent_minimal),
        "payload.action": (MOVE, {"dx": -1, "dy": 1, "say": "à gauche"}),
    }


def event_values(obs_schema: str, act_schema: str, obs_payload: bytes, act_payload: bytes) -> list[Any]:
    """One representative event per type (two for types with a union worth both branches)."""
    classes = (
        ev.ActorClassSpec("grid", obs_schema, act_schema, default_action='{"dx": 0, "dy": 0, "say": null}'),
        ev.ActorClassSpec("watcher", '"null"', '"null"'),
    )
    actors = (
        ev.ActorSpec("alice", "grid", "scripted", config='{"speed": 2, "name": "Zoë"}'),
        ev.ActorSpec("bob", "grid", "human", client=True),
    )
    started = dict(
        trial_id=TRIAL,
        spec="grid-world",
        environment="gridworld",
        environment_entry="demo.grid:GridEnv",
        environment_config='{"size": [8, 8]}',
        actors=actors,
        actor_classes=classes,
        seed=2**40 + 1,
    )
    return [
        ev.StartRequest(TRIAL, spec="grid-world", requested_by="ctl-1"),
        ev.StartRequest(
            TRIAL,
            spec="grid-world",
            requested_by="ctl-1",
            seed=-(2**63),
            environment="gridworld",
            environment_config='{"size": [4, 4]}',
            implementations={"alice": "scripted", "bøb": "human"},
            actors='[{"name": "alice"}]',
            max_ticks=1000,
            parameters='{"difficulty": "härd"}',
            experiment="dqn-cartpole",
            phase="evaluate",
        ),
        ev.TerminateRequest(TRIAL, hard=True, reason="operator: stop ⏹", requested_by="ctl-1"),
        ev.TrialStarted(
            **started,
            max_ticks=500,
            response_timeout_ms=2500,
            timeout_policy="drop",
            inactivity_timeout_ms=60_000,
            wall_clock_limit_ms=3_600_000,
            join_timeout_ms=30_000,
            parameters='{"wind": 0.25}',
            experiment="dqn-cartpole",
            phase="heatup",
            tick_interval_ms=150,
        ),
        ev.TrialPending(**started),
        ev.TrialRejected(TRIAL, reason="unknown spec «grid-wörld»", requested_by="ctl-1"),
        ev.TrialTerminating(TRIAL, reason="soft stop", requested_by="ctl-1"),
        ev.EnvironmentDone(TRIAL, tick=41, reason="terminated", details="goal reached"),
        ev.TrialEnded(TRIAL, tick=41, reason="environment", details=""),
        ev.Observation(TRIAL, tick=0, actor="alice", payload=obs_payload, terminated=False, truncated=True, final=True),
        # An observation carrying the environment's reward for the tick before (schema v2): its
        # record has the header reward=1, and every reader takes it as that reward just before it.
        ev.Observation(TRIAL, tick=2, actor="alice", payload=obs_payload, terminated=True, reward=-1.5),
        ev.Action(TRIAL, tick=0, actor="alice", payload=act_payload),
        ev.Action(TRIAL, tick=1, actor="alice", payload=act_payload, policy_version=2**33 + 5),
        ev.Reward(TRIAL, tick=3, receiver="grid.*", value=-0.1, confidence=0.75, sender="judge/style"),
        ev.Reward(TRIAL, tick=4, receiver="alice", value=1e-300, user_data='{"why": "schön"}'),
        ev.Message(TRIAL, tick=5, sender="alice", receivers=("bob", "env"), message_id="m-1", payload='{"hi": "👋"}'),
        ev.View(TRIAL, tick=7, view='{"kind": "grid", "rows": ["#.@", "..#"], "score": 2.5}'),
        ev.ActorJoined(TRIAL, actor="bob", implementation="human"),
        ev.ActorLeft(TRIAL, tick=9, actor="bob", reason="timeout"),
        ev.ActorTimeout(TRIAL, tick=8, actor="bob", policy="default_action"),
        ev.ParametersChanged(TRIAL, tick=10, sender="ctl-1", parameters='{"wind": 0.5}'),
        ev.TrialRecord(
            TRIAL,
            status="ended",
            spec="grid-world",
            partition=3,
            start_offset=0,
            end_offset=2**40,
            ticks=41,
            reason="environment",
            implementations={"alice": "scripted"},
            created_ms=1_735_689_600_000,
            updated_ms=1_735_689_660_000,
            experiment="dqn-cartpole",
            phase="train",
            returns={"alice": 37.5, "bob": -2.25},
        ),
        ev.DeadLetter(
            topic="trialog.events",
            partition=0,
            offset=123,
            key=TRIAL.encode(),
            value=b"\xc3\x01\xde\xad\xbe\xef",
            headers={"kind": b"observation", "raw": b"\x00\xff"},
            reason="unknown schema fingerprint deadbeef",
            service="logger",
            timestamp_ms=1_735_689_600_000,
        ),
        ev.DeadLetter(
            topic="trialog.control",
            partition=1,
            offset=0,
            key=None,
            value=None,
            headers={},
            reason="empty record",
            service="orchestrator",
        ),
    ]


def _entry(name: str, schema: Schema, data: bytes, expected: Any) -> dict[str, Any]:
    return {
        "name": name,
        "file": f"{name}.bin",
        "schema_name": schema.name,
        "fingerprint": data[2:10].hex(),
        "schema": tidy(json.loads(schema.json)),
        "canonical": schema.canonical,
        "expected": expected,
    }


def build() -> tuple[list[dict[str, Any]], dict[str, bytes]]:
    """Every vector's manifest entry and bytes, checked against the Python decoder."""
    store = SchemaStore.with_builtin()
    codec = EventCodec(store)
    entries: list[dict[str, Any]] = []
    blobs: dict[str, bytes] = {}

    def add(entry: dict[str, Any], data: bytes) -> None:
        assert data[:2] == b"\xc3\x01" and data[2:10] == bytes.fromhex(entry["fingerprint"])
        entries.append(entry)
        blobs[entry["file"]] = data

    payloads: dict[str, bytes] = {}
    for name, (raw, value) in payload_values().items():
        schema = store.register(raw)
        named = schema.parsed["__named_schemas"]
        data = schema.encode(value)
        expected = to_json(schema.parsed, value, named)
        decoded = to_json(schema.parsed, store.decode(data), named)
        assert decoded == expected, f"{name}: Python decodes {decoded} but wrote {expected}"
        payloads[name] = data
        add(_entry(name, schema, data, expected), data)

    # trial.started carries the actor classes' schemas as the codec's self-contained JSON
    obs = json.dumps(tidy(json.loads(store.get("demo.grid.AgentObservation").json)), ensure_ascii=False)
    act = json.dumps(tidy(json.loads(store.get("demo.grid.Move").json)), ensure_ascii=False)
    counts: dict[str, int] = {}
    for event in event_values(obs, act, payloads["payload.observation.full"], payloads["payload.action"]):
        counts[event.KIND] = counts.get(event.KIND, 0) + 1
        name = f"event.{event.KIND}" + (f".{counts[event.KIND]}" if counts[event.KIND] > 1 else "")
        schema = store.get(event.SCHEMA)
        named = schema.parsed["__named_schemas"]
        data = codec.encode(event)
        record = event_record(event)
        expected = to_json(schema.parsed, record, named)
        assert to_json(schema.parsed, store.decode(data), named) == expected, name
        if isinstance(event, ev.DeadLetter):
            key, headers = event.key, event.headers_list()
        else:
            assert codec.decode(data, event.KIND) == event, name
            key, headers = event.trial_id.encode(), event.headers()
        entry = _entry(name, schema, data, expected)
        entry["kafka"] = {
            "key": None if key is None else key.decode(),
            "headers": {k: v.decode() for k, v in headers},
        }
        if isinstance(event, ev.Observation):
            entry["payload_vector"] = "payload.observation.full"
        elif isinstance(event, ev.Action):
            entry["payload_vector"] = "payload.action"
        add(entry, data)

    # Evolution: write with v1, read with v2. Both live in a store of their own, since
    # registering v2 makes it the reader schema for the name.
    evo = SchemaStore()
    v1 = evo.register(SETTINGS_V1, reader=False)
    v2 = evo.register(SETTINGS_V2)
    written = {"name": "rover", "level": 7, "gain": 0.1, "legacy": "dropped in v2", "tags": ["α", "β"]}
    data = v1.encode(written)
    named = v2.parsed["__named_schemas"]
    promoted = {k: v for k, v in written.items() if k != "legacy"}
    promoted["gain"] = float(np.float32(written["gain"]))  # float -> double keeps the 32-bit value
    expected = to_json(v2.parsed, promoted, named)
    decoded = to_json(v2.parsed, evo.decode(data), named)
    assert decoded == expected, f"evolution: Python reads {decoded}, expected {expected}"
    add(_evolution_entry("evolution.settings.v1-to-v2", v1, v2, data, written, expected), data)

    # Trialog's own evolution: a record written with an earlier version of an event schema (kept
    # in schemas/previous/) reads with the current schema, the fields added since at their
    # defaults — an action from before policy_version, an observation from before it could carry
    # a reward (none carried: it reads as the observation it always was).
    for name, previous, added, written in (
        (
            "evolution.action.v1-to-v2",
            "action.v1.avsc",
            {"policy_version": None},
            {"trial_id": TRIAL, "tick": 3, "actor": "alice", "payload": payloads["payload.action"]},
        ),
        (
            "evolution.observation.v1-to-v2",
            "observation.v1.avsc",
            {"reward": None},
            {
                "trial_id": TRIAL,
                "tick": 3,
                "actor": "alice",
                "payload": payloads["payload.observation.minimal"],
                "terminated": False,
                "truncated": True,
                "final": False,
            },
        ),
    ):
        older = store.by_fingerprint(_fingerprint_of(store, ROOT / "schemas" / "previous" / previous))
        current = store.get(older.name)
        data = older.encode(written)
        named = current.parsed["__named_schemas"]
        expected = to_json(current.parsed, {**written, **added}, named)
        assert to_json(current.parsed, store.decode(data), named) == expected, f"evolution of {older.name}"
        add(_evolution_entry(name, older, current, data, written, expected), data)
    return entries, blobs


def _fingerprint_of(store: SchemaStore, path: Path) -> bytes:
    """The fingerprint of a schema file (registered as a writer schema only)."""
    return store.register(json.loads(path.read_text()), reader=False).fingerprint


def _evolution_entry(
    name: str, writer: Schema, reader: Schema, data: bytes, written: Any, expected: Any
) -> dict[str, Any]:
    """A vector written with ``writer`` that must read as ``expected`` through ``reader``."""
    entry = _entry(name, writer, data, expected)
    entry["written"] = to_json(writer.parsed, written, writer.parsed["__named_schemas"])
    entry["reader_schema_name"] = reader.name
    entry["reader_fingerprint"] = reader.fingerprint.hex()
    entry["reader_schema"] = tidy(json.loads(reader.json))
    entry["reader_canonical"] = reader.canonical
    return entry


# --- record tags, derived keys and join tokens (trust.json) ------------------------------------
# Fixed masters, so that the vectors are deterministic; each is what `trialog keyring generate`
# would hold for that role, were its random bytes these.
TRUST_MASTERS = {"actors": 1, "controller": 2, "environment": 3, "orchestrator": 4, "seats": 5}
TRUST_NOW = 1_767_225_600  # 2026-01-01T00:00:00Z: when the join token is minted and checked
# (event vector, the writer's role, the keyring it holds: "core", "actors.<impl>" or "seat")
TAGGED = (
    ("event.observation", "environment", "core"),
    ("event.observation.2", "environment", "core"),  # its reward header is not under the tag: the body is
    ("event.action", "actors.scripted", "actors.scripted"),
    ("event.reward", "controller", "core"),
    ("event.message", "actors.scripted", "actors.scripted"),
    ("event.actor.joined", "seat", "seat"),
)


def trust_vectors(entries: list[dict[str, Any]], blobs: dict[str, bytes]) -> dict[str, Any]:
    """Derived keys, the tags Trialog's own Authenticator adds to some event vectors, and a
    join token, made with the fixed masters above by the code of trialog.trust."""
    from trialog.trust.authenticator import Authenticator
    from trialog.trust.join_tokens import mint_join_token
    from trialog.trust.keys import KEY_LABEL, Keyring, b64url, derive, length_prefixed
    from trialog.trust.seats import Seat
    from trialog.trust.tags import MAC_PREFIX, mac_input

    keyring = Keyring({role: bytes(range(n * 32, n * 32 + 32)) for role, n in TRUST_MASTERS.items()})
    by_name = {e["name"]: e for e in entries}
    codec = EventCodec(SchemaStore.with_builtin())
    started = codec.decode(blobs[by_name["event.trial.started"]["file"]], ev.TrialStarted.KIND)

    def derived(key_id: str, master: str, *parts: str) -> dict[str, Any]:
        message = length_prefixed(KEY_LABEL) + b"".join(length_prefixed(p.encode()) for p in parts)
        key = derive(keyring.keys[master], *parts)
        assert key == keyring.key(key_id, TRIAL) or key_id == "join-token"
        return {"key_id": key_id, "master": master, "parts": list(parts), "input_hex": message.hex(),
                "key_hex": key.hex(), "key_b64url": b64url(key)}  # fmt: skip

    seat_bob = keyring.key("seat.bob", TRIAL)
    writers = {
        "core": keyring,
        "actors.scripted": keyring.restricted_to("scripted"),
        "seat": Keyring({}, source="a join token"),
    }
    tags = []
    for name, role, held in TAGGED:
        entry = by_name[name]
        value = blobs[entry["file"]]
        auth = Authenticator(writers[held], role=role)
        auth.learn(started)
        if held == "seat":
            auth.hold(Seat(TRIAL, "bob", holder="holder-7f3a", takeover=True), seat_bob)
        headers = [(k, v.encode()) for k, v in entry["kafka"]["headers"].items()]
        added = auth.tag(TRIAL, headers, value)
        headers += [(k, v) for k, v in added if not k.startswith(MAC_PREFIX)]
        tags.append({
            "vector": name, "writer": role, "record_key": entry["kafka"]["key"],
            "headers": {k: v.decode() for k, v in headers},
            "mac_input_hex": mac_input(TRIAL.encode(), dict(headers), value).hex(),
            "tags": {k: v.hex() for k, v in added if k.startswith(MAC_PREFIX)},
        })  # fmt: skip
    token = mint_join_token(keyring, TRIAL, "bob", ttl_s=3600, now=TRUST_NOW)
    return {
        "format": "trialog-trust-vectors/1",
        "conventions": {
            "*_hex": "bytes as lower-case hex",
            "*_b64url": "bytes as base64url without padding (RFC 4648 section 5, no '=')",
            "LP(x)": "the 4-byte big-endian length of x, then x",
            "derive(master, parts...)": 'HMAC-SHA256(master, LP("trialog.key.v1") || LP(part)...) (input_hex)',
            "tags": "header mac.<key id> = HMAC-SHA256(key, mac_input): the raw 32-byte digest as the header's value",
            "vector": "the record's value is <vector>.bin of manifest.json; headers: every header but the tags",
        },  # fmt: skip
        "keyring": json.loads(keyring.to_json()),
        "derived_keys": [
            derived("actors.scripted", "actors", "actors", "scripted"),
            derived("seat.bob", "seats", "seat", TRIAL, "bob"),
            derived("join-token", "seats", "join-token"),
        ],
        "tags": tags,
        "join_token": {
            "token": token,
            "now": TRUST_NOW,
            "trial": TRIAL,
            "actor": "bob",
            "exp": TRUST_NOW + 3600,
            "seat_key_b64url": b64url(seat_bob),
            "mac_key": "join-token",
        },  # fmt: skip
    }


def write(out: Path) -> list[dict[str, Any]]:
    entries, blobs = build()
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.bin"):  # a renamed vector must not leave its old file behind
        if stale.name not in blobs:
            stale.unlink()
    for file, data in blobs.items():
        (out / file).write_bytes(data)
    manifest = {"format": FORMAT, "conventions": CONVENTIONS, "vectors": entries}
    text = json.dumps(manifest, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    (out / "manifest.json").write_text(text, encoding="utf-8")
    trust = json.dumps(trust_vectors(entries, blobs), indent=2, ensure_ascii=False) + "\n"
    (out / "trust.json").write_text(trust, encoding="utf-8")
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "schemas" / "vectors", help="output folder")
    args = parser.parse_args(argv)
    entries = write(args.out)
    print(f"wrote {len(entries)} vectors to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
