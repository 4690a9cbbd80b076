"""NumPy arrays through the Avro codec: trialog.Tensor as a fastavro logical type."""

from __future__ import annotations

import io
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


def _fastavro_bytes(tensor, value) -> bytes:
    """What fastavro writes for ``value`` with the tensor's parsed schema (logical type included)."""
    buf = io.BytesIO()
    buf.write(tensor.header)
    fastavro.schemaless_writer(buf, tensor.parsed, value)
    return buf.getvalue()


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int64", "uint64", "float16", "float32", "complex128"])
@pytest.mark.parametrize("shape", [(), (0,), (4,), (2, 3), (1, 70, 1), (3, 0, 2)])
def test_a_tensor_schema_encodes_as_fastavro_does_without_it(store, dtype, shape):
    """A value whose schema is the Tensor itself (a Box space's) takes Trialog's own codec:
    the same bytes as fastavro's, read back by either to the same array."""
    tensor = store.get("trialog.Tensor")
    assert tensor.own is not None and tensor.flat is None
    rng = np.random.default_rng(len(shape) * 31 + len(dtype))
    value = (rng.random(shape) * 200 - 100).astype(dtype)
    ours = tensor.encode(value)
    assert ours == _fastavro_bytes(tensor, value)
    for read in (
        store.decode(ours),
        fastavro.schemaless_reader(io.BytesIO(ours[HEADER_SIZE:]), tensor.parsed),
    ):
        assert read.dtype == np.dtype(dtype) and read.shape == shape and np.array_equal(read, value)
    record = {"dtype": dtype, "shape": list(shape), "data": value.astype(np.dtype(dtype).newbyteorder("<")).tobytes()}
    assert tensor.encode(record) == ours  # a Tensor record as a mapping, as fastavro takes it


def test_a_tensor_in_blocks_that_say_their_size_decodes(store):
    """Avro lets an array's block count be negative, followed by the block's size in bytes."""
    tensor = store.get("trialog.Tensor")
    # dtype "int8", shape [2, 3] as one block of count -2 and size 2, then the end; 6 bytes of data.
    body = b"\x08int8" + b"\x03\x04\x04\x06\x00" + b"\x0c" + bytes(range(6))
    assert store.decode(tensor.header + body).tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(CodecError, match="trailing"):
        store.decode(tensor.header + body + b"\x00")
    with pytest.raises(CodecError):
        store.decode(tensor.header + body[:-1])  # data shorter than its length
    for value in (None, "ab", b"ab", {"dtype": "int8", "shape": [1]}, {"dtype": "int8", "shape": [1], "data": "x"}):
        with pytest.raises(CodecError):
            tensor.encode(value)
