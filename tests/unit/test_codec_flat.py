"""The flat-record codec against fastavro: the same bytes for the same values, the same
values back from the same bytes, on every built-in flat schema and random values; and
defined errors for values and bytes that do not fit."""

from __future__ import annotations

import io
import random

import fastavro
import numpy as np
import pytest

from trialog.errors import CodecError
from trialog.protocol.codec import HEADER_SIZE, SchemaStore
from trialog.protocol.codec_flat import compile_flat

STORE = SchemaStore.with_builtin()
FLAT = sorted((s for s in STORE._by_name.values() if s.flat is not None), key=lambda s: s.name)  # noqa: SLF001

# Every shape compile_flat takes, beside the built-in schemas.
ALL_PRIMITIVES = STORE.register(
    {
        "type": "record",
        "name": "test.Flat",
        "fields": [
            {"name": "i", "type": "int"},
            {"name": "l", "type": "long"},
            {"name": "f", "type": "float"},
            {"name": "d", "type": "double"},
            {"name": "b", "type": "boolean"},
            {"name": "s", "type": "string"},
            {"name": "y", "type": "bytes"},
            {"name": "n", "type": "null"},
            {"name": "u1", "type": ["null", "string"], "default": None},
            {"name": "u2", "type": ["long", "null"], "default": 5},
            {"name": "dd", "type": "double", "default": 1.5},
        ],
    }
)

# One-, two- and three-byte varints at their bounds (two bytes are read without the general loop).
EDGE_LONGS = [
    *(0, 1, -1, 63, 64, -64, -65, 127, 128, 8191, 8192, -8192, -8193),
    *(2**31 - 1, -(2**31), 2**53, 2**63 - 1, -(2**63)),
]


def _value(rng: random.Random, kind):
    if isinstance(kind, list):
        return None if rng.random() < 0.4 else _value(rng, next(k for k in kind if k != "null"))
    if kind == "null":
        return None
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "int":
        return rng.choice([rng.randint(-(2**31), 2**31 - 1), *[n for n in EDGE_LONGS if -(2**31) <= n < 2**31]])
    if kind == "long":
        return rng.choice([rng.randint(-(2**63), 2**63 - 1), rng.randint(-300, 300), *EDGE_LONGS])
    if kind == "float":
        return float(np.float32(rng.uniform(-1e6, 1e6)))  # representable: decodes to the same value
    if kind == "double":
        return rng.choice([rng.uniform(-1e300, 1e300), 0.0, -0.0, float("inf"), rng.random()])
    if kind == "string":
        return "".join(
            chr(rng.choice([rng.randint(32, 126), rng.randint(0x80, 0xD7FF), rng.randint(0x10000, 0x10FFFF)]))
            for _ in range(rng.randint(0, 70))
        )
    if kind == "bytes":
        return rng.randbytes(rng.choice([0, 1, 63, 64, 200, 5000]))
    raise AssertionError(kind)


def _fastavro_encode(schema, value) -> bytes:
    buf = io.BytesIO()
    buf.write(schema.header)
    fastavro.schemaless_writer(buf, schema.parsed, value, strict_allow_default=True)
    return buf.getvalue()


def _fastavro_decode(schema, data: bytes):
    buf = io.BytesIO(data)
    buf.seek(HEADER_SIZE)
    return fastavro.schemaless_reader(buf, schema.parsed)


@pytest.mark.parametrize("schema", [*FLAT, ALL_PRIMITIVES], ids=lambda s: s.name)
def test_same_bytes_and_values_as_fastavro(schema):
    assert schema.flat is not None
    rng = random.Random(schema.name)
    for _ in range(300):
        value = {
            f["name"]: _value(rng, f["type"])
            for f in schema.parsed["fields"]
            if rng.random() < 0.9 or "default" not in f
        }
        ours = schema.encode(value)
        assert ours == _fastavro_encode(schema, value)
        assert schema.decode_body(ours, HEADER_SIZE) == _fastavro_decode(schema, ours)
        assert schema.decode_body(memoryview(ours), HEADER_SIZE) == _fastavro_decode(schema, ours)


def test_numpy_numbers_are_accepted_as_fastavro_takes_them():
    value = {"i": np.int32(-7), "l": np.int64(2**40), "f": np.float32(0.5), "d": np.float64(-2.25), "b": np.bool_(True),
             "s": "x", "y": b"", "n": None}  # fmt: skip
    assert ALL_PRIMITIVES.encode(value) == _fastavro_encode(ALL_PRIMITIVES, value)


@pytest.mark.parametrize(
    "change, why",
    [
        ({"i": 2**31}, "out of range"),
        ({"l": 2**63}, "out of range"),
        ({"l": 1.5}, "float"),
        ({"l": "3"}, "str"),
        ({"d": "1.0"}, "number"),
        ({"s": b"x"}, "string"),
        ({"y": "x"}, "bytes"),
        ({"n": 0}, "null"),
        ({"u1": 3}, "string"),
    ],
)
def test_values_that_do_not_fit_are_codec_errors(change, why):
    value = {"i": 1, "l": 2, "f": 0.5, "d": 1.0, "b": False, "s": "", "y": b"", "n": None, **change}
    with pytest.raises(CodecError, match=why):
        ALL_PRIMITIVES.encode(value)


def test_a_missing_field_takes_its_default_or_is_an_error():
    value = {"i": 1, "l": 2, "f": 0.5, "d": 1.0, "b": False, "s": "", "y": b"", "n": None}
    decoded = ALL_PRIMITIVES.decode_body(ALL_PRIMITIVES.encode(value), HEADER_SIZE)
    assert (decoded["u1"], decoded["u2"], decoded["dd"]) == (None, 5, 1.5)
    with pytest.raises(CodecError, match="no value for field 'i'"):
        ALL_PRIMITIVES.encode({k: v for k, v in value.items() if k != "i"})


def test_bytes_that_are_not_such_a_record_are_codec_errors():
    action = STORE.get("trialog.Action")
    good = action.encode({"trial_id": "t", "tick": 3, "actor": "a", "payload": b"xyz", "policy_version": 7})
    body = good[HEADER_SIZE:]
    bad = {
        "truncated": good[:-1],
        "a two-byte varint cut short": good[:-2] + b"\x02\xc8",  # policy_version 100 without its second byte
        "trailing bytes": good + b"\x00",
        "a length past the end": good[:HEADER_SIZE] + b"\x7e" + body[1:],  # trial_id claims 63 bytes
        "negative length": good[:HEADER_SIZE] + b"\x01" + body[1:],
        "union branch": good[:-2] + b"\x04\x0e",
        "varint longer than 10 bytes": good[:HEADER_SIZE] + b"\x02t" + b"\xff" * 11 + b"\x01",
        "invalid UTF-8": good[:HEADER_SIZE] + b"\x02\xff" + body[2:],
    }
    for name, data in bad.items():
        with pytest.raises(CodecError):
            action.decode_body(data, HEADER_SIZE)
        with pytest.raises(Exception):  # noqa: B017 - fastavro refuses them too, each its own way
            if name == "trailing bytes":
                raise ValueError  # fastavro stops at the end of the record; Schema.decode_body checks the rest
            _fastavro_decode(action, data)
    observation = STORE.get("trialog.Observation")
    ok = observation.encode({"trial_id": "t", "tick": 0, "actor": "a", "payload": b""})
    with pytest.raises(CodecError, match="neither 0 nor 1"):  # its last flag, before the reward's null
        observation.decode_body(ok[:-2] + b"\x02" + ok[-1:], HEADER_SIZE)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "record", "name": "x.A", "fields": [{"name": "a", "type": {"type": "array", "items": "long"}}]},
        {"type": "record", "name": "x.M", "fields": [{"name": "m", "type": {"type": "map", "values": "long"}}]},
        {
            "type": "record",
            "name": "x.E",
            "fields": [{"name": "e", "type": {"type": "enum", "name": "x.Ek", "symbols": ["A"]}}],
        },
        {"type": "record", "name": "x.U", "fields": [{"name": "u", "type": ["long", "string"]}]},
        {
            "type": "record",
            "name": "x.L",
            "fields": [{"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}}],
        },
        {"type": "record", "name": "x.Y", "fields": [{"name": "y", "type": "bytes", "default": "\u00ff"}]},
        {
            "type": "record",
            "name": "x.N",
            "fields": [{"name": "n", "type": {"type": "record", "name": "x.In", "fields": []}}],
        },
    ],
    ids=lambda s: s["name"],
)
def test_other_schemas_are_left_to_fastavro(schema):
    assert compile_flat(fastavro.parse_schema(schema)) is None
