"""NumPy arrays through the Avro codec: trialog.Tensor as a fastavro logical type."""

from __future__ import annotations

import json

import fastavro
import numpy as np
import pytest
from fastavro.schema import fingerprint, to_parsing_canonical_form

from trialog.errors import CodecError
from trialog.protocol.codec import HEADER_SIZE, SchemaStore, schemas_dir


@pytest.fixture
def store() -> SchemaStore:
    return SchemaStore.with_builtin()


def test_a_union_of_two_records_that_both_hold_tensors_round_trips(store):
    """Regression: the hand-written walker converted only the first record branch of a union."""
    schema = store.register(
        {
            "type": "record",
            "name": "test.Holder",
            "fields": [
                {
                    "name": "item",
                    "type": [
                        "null",
                        {
                            "type": "record",
                            "name": "test.Image",
                            "fields": [{"name": "pixels", "type": "trialog.Tensor"}],
                        },
                        {
                            "type": "record",
                            "name": "test.Sound",
                            "fields": [{"name": "wave", "type": "trialog.Tensor"}, {"name": "rate", "type": "int"}],
                        },
                    ],
                },
                {"name": "many", "type": {"type": "map", "values": {"type": "array", "items": "trialog.Tensor"}}},
            ],
        }
    )
    wave = np.linspace(-1, 1, 5, dtype=np.float32)
    for item in ({"pixels": np.arange(6, dtype=np.uint8).reshape(2, 3)}, {"wave": wave, "rate": np.int32(8000)}, None):
        value = {"item": item, "many": {"a": [np.eye(2), np.zeros((0, 3), dtype=np.int16)], "b": []}}
        back = store.decode(schema.encode(value))
        if item is None:
            assert back["item"] is None
        else:
            ((field, array),) = [(k, v) for k, v in item.items() if isinstance(v, np.ndarray)]
            assert isinstance(back["item"][field], np.ndarray) and back["item"][field].dtype == array.dtype
            np.testing.assert_array_equal(back["item"][field], array)
        assert back["many"]["a"][1].shape == (0, 3) and back["many"]["a"][1].dtype == np.int16
        np.testing.assert_array_equal(back["many"]["a"][0], np.eye(2))


def test_numpy_scalars_and_arrays_fill_plain_avro_fields(store):
    schema = store.register(
        {
            "type": "record",
            "name": "test.Plain",
            "fields": [
                {"name": "n", "type": "long"},
                {"name": "x", "type": "float"},
                {"name": "ok", "type": "boolean"},
                {"name": "xs", "type": {"type": "array", "items": "double"}},
                {"name": "t", "type": "trialog.Tensor"},
            ],
        }  # fmt: skip
    )
    back = store.decode(
        schema.encode(
            {"n": np.int64(3), "x": np.float32(0.5), "ok": np.bool_(True), "xs": np.array([1.0, 2.0]), "t": [[1, 2]]}
        )
    )
    assert back["n"] == 3 and back["x"] == 0.5 and back["ok"] is True and back["xs"] == [1.0, 2.0]
    np.testing.assert_array_equal(back["t"], np.array([[1, 2]]))


@pytest.mark.parametrize(
    "record, problem",
    [
        ({"dtype": "object", "shape": [1], "data": b"x"}, "dtype 'object'"),
        ({"dtype": "float32", "shape": [3], "data": b"\x00" * 4}, "needs 12 bytes"),
        ({"dtype": "int8", "shape": [-1], "data": b""}, "negative"),
    ],
)
def test_a_malformed_tensor_is_a_codec_error_not_a_key_error(store, record, problem):
    """Bytes that are valid Avro but not a valid tensor: CodecError, with what is wrong."""
    tensor = store.get("trialog.Tensor")
    # Written with the plain record schema (no conversion), as another language might.
    raw = fastavro.parse_schema(json.loads((schemas_dir() / "tensor.avsc").read_text()))
    import io

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, raw, record)
    with pytest.raises(CodecError, match=problem):
        store.decode(tensor.header + buf.getvalue())


def test_garbage_after_the_header_is_a_codec_error(store):
    tensor = store.get("trialog.Tensor")
    for body in (b"", b"\x01", b"\xff" * 40):
        with pytest.raises(CodecError):
            store.decode(tensor.header + body)


def test_an_unsupported_dtype_is_refused_when_encoding(store):
    with pytest.raises(CodecError, match="cannot travel"):
        store.get("trialog.Tensor").encode(np.array(["a"], dtype=object))


def test_fingerprints_are_those_of_the_schema_files(store):
    """The logical type is not part of the canonical form: fingerprints are unchanged,
    and the JSON that travels is the file's (no logicalType added)."""
    raw = json.loads((schemas_dir() / "tensor.avsc").read_text())
    expected = bytes.fromhex(fingerprint(to_parsing_canonical_form(fastavro.parse_schema(raw)), "CRC-64-AVRO"))
    tensor = store.get("trialog.Tensor")
    assert tensor.fingerprint == expected
    assert "logicalType" not in tensor.json
    assert store.get("trialog.Tensor").encode(np.zeros(1))[2:HEADER_SIZE] == expected
