"""Avro encoding of everything Trialog writes, readable by any standard Avro library.

Every value on a Trialog topic, and every payload nested inside one (observations,
actions), is an Avro **single-object encoding** (Avro specification, "Single
object encoding"): the two marker bytes ``C3 01``, the 8-byte little-endian
CRC-64-AVRO fingerprint of the writer schema's parsing canonical form, then the
Avro binary body. A reader in any language looks the fingerprint up among the
schemas it knows (the files in ``schemas/`` and the actor-class schemas carried by
``trial.started``) and decodes with its own Avro library.

Schema evolution follows Avro's resolution rules: a :class:`SchemaStore` knows
every writer schema by fingerprint and, per full name, the *reader* schema the
application wants (the newest registered); decoding resolves writer → reader, so
a reader with an added field (with a default) reads old records.

NumPy arrays travel as ``trialog.Tensor`` (dtype name, shape, C-order
little-endian bytes), a record with the logical type ``trialog.tensor``: wherever a
schema says ``trialog.Tensor``, :meth:`Schema.encode` accepts an ``ndarray`` (or
anything ``np.asarray`` takes) and decoding returns one. NumPy scalars and arrays
are accepted wherever Avro wants numbers or arrays.

Flat records (primitive fields and ``["null", T]`` unions: every tick's events) are
encoded and decoded by :mod:`trialog.protocol.codec_flat`, byte for byte as fastavro would,
without fastavro's per-call set-up; every other schema goes through fastavro.

Every failure — bad bytes, an unknown schema, a value that does not match its
schema — raises :class:`trialog.errors.CodecError`.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import fastavro
import fastavro.read
import fastavro.write
import numpy as np
from fastavro.schema import fingerprint, to_parsing_canonical_form

from trialog.errors import CodecError
from trialog.protocol.codec_flat import FlatCodec, compile_flat, primitive, read_varint, varint

MAGIC = b"\xc3\x01"
HEADER_SIZE = 10  # 2 marker bytes + 8 fingerprint bytes
TENSOR = "trialog.Tensor"

# The dtypes a Tensor may carry. Names are NumPy's; bytes are always little-endian.
SUPPORTED_DTYPES = (
    "bool",
    "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64",
    "complex64", "complex128",
)  # fmt: skip
_DTYPES = {name: np.dtype(name).newbyteorder("<") for name in SUPPORTED_DTYPES}
_NATIVE = {name: np.dtype(name) for name in SUPPORTED_DTYPES}  # what a decoded tensor holds
# A dtype's name by the dtype: NumPy makes ``dtype.name`` anew on each call (1.6 µs against a lookup's
# 0.04), and every observation of a Box space is a tensor. Other byte orders are named the slow way.
_NAMES = {dtype: name for table in (_NATIVE, _DTYPES) for name, dtype in table.items()}


def schemas_dir() -> Path:
    """The folder holding Trialog's own ``.avsc`` files (repository or installed package)."""
    here = Path(__file__).resolve().parents[1]  # the trialog package
    for candidate in (here / "_schemas", here.parent / "schemas"):
        if candidate.is_dir():
            return candidate
    raise CodecError("Trialog's schema files are missing: expected trialog/_schemas or schemas/ next to the package")


# --- tensors -------------------------------------------------------------------
# A fastavro logical type on trialog.Tensor: fastavro converts at the tensor itself,
# wherever it sits (records, arrays, maps, unions of records), in its own walk.
# ``logicalType`` is not part of Avro's canonical form, so fingerprints do not change,
# and readers in other languages ignore a logical type they do not know.

TENSOR_LOGICAL_TYPE = "trialog.tensor"


def tensor_to_record(array: Any) -> dict[str, Any]:
    """A NumPy array (or anything ``np.asarray`` takes) as a ``trialog.Tensor`` record."""
    arr = np.asarray(array)
    name = _NAMES.get(arr.dtype) or arr.dtype.name
    if name not in _DTYPES:
        raise CodecError(f"dtype {name!r} cannot travel as a trialog.Tensor; supported: {', '.join(SUPPORTED_DTYPES)}")
    data = np.ascontiguousarray(arr, dtype=_DTYPES[name]).tobytes()
    return {"dtype": name, "shape": list(arr.shape), "data": data}


def record_to_tensor(record: dict[str, Any]) -> np.ndarray:
    """A ``trialog.Tensor`` record as a NumPy array in native byte order."""
    name = record["dtype"]
    dtype = _DTYPES.get(name)
    if dtype is None:
        raise CodecError(f"tensor dtype {name!r} is not one of {', '.join(SUPPORTED_DTYPES)}")
    shape = tuple(record["shape"])
    if any(n < 0 for n in shape):
        raise CodecError(f"tensor shape {shape} has a negative dimension")
    # math.prod: Python integers cannot overflow, and on every observation it costs a fifth of
    # NumPy's reduction over a small shape.
    expected = math.prod(shape) * dtype.itemsize
    if len(record["data"]) != expected:
        raise CodecError(f"tensor of dtype {name} and shape {shape} needs {expected} bytes, got {len(record['data'])}")
    return np.frombuffer(record["data"], dtype=dtype).reshape(shape).astype(_NATIVE[name], copy=False)


def _write_tensor(value: Any, schema: Any) -> Any:
    # fastavro also calls this while choosing a union's branch, with whatever the datum
    # holds there: anything that is not array-like goes on as it is, to not match.
    if value is None or isinstance(value, (dict, str, bytes)):
        return value
    return tensor_to_record(value)


def _read_tensor(value: dict[str, Any], writer_schema: Any, reader_schema: Any) -> np.ndarray:
    return record_to_tensor(value)


fastavro.write.LOGICAL_WRITERS[f"record-{TENSOR_LOGICAL_TYPE}"] = _write_tensor
fastavro.read.LOGICAL_READERS[f"record-{TENSOR_LOGICAL_TYPE}"] = _read_tensor


# The Avro primitives a Tensor is made of, as the flat codec writes and reads them.
(_write_string, _read_string), (_write_long, _read_long), (_write_bytes, _read_bytes) = map(
    primitive, ("string", "long", "bytes")
)


class TensorCodec:
    """A value whose schema is ``trialog.Tensor`` itself (a Box space's observations and
    actions), encoded and decoded without fastavro: the same bytes as
    :func:`fastavro.schemaless_writer` with the logical type above, at about a third of its
    cost (a CartPole observation: 6.8 against 18.7 µs to encode, 5.5 against 13.4 µs to
    decode; every step of a Gymnasium environment writes one and each reader decodes it).
    Strict as :mod:`trialog.protocol.codec_flat` is: a varint longer than 10 bytes, a length
    past the end, invalid UTF-8 and trailing bytes are errors."""

    def encode(self, value: Any, header: bytes) -> bytes:
        if value is None or isinstance(value, (str, bytes)):
            raise TypeError(f"a trialog.Tensor needs an array, not {type(value).__name__}")
        record = value if isinstance(value, dict) else tensor_to_record(value)
        shape = record["shape"]
        parts = [header, _write_string(record["dtype"])]
        if len(shape):  # Avro arrays: one block of items, then the empty block
            parts.append(varint(len(shape)))
            parts.extend(map(_write_long, shape))
        parts.append(b"\x00")
        parts.append(_write_bytes(record["data"]))
        return b"".join(parts)

    def decode(self, data: bytes, pos: int) -> np.ndarray:
        dtype, pos = _read_string(data, pos)
        shape: list[int] = []
        while True:
            count, pos = read_varint(data, pos)
            if count == 0:
                break
            if count < 0:  # a block that says its size in bytes too (allowed by Avro)
                count = -count
                _, pos = read_varint(data, pos)
            for _ in range(count):
                n, pos = _read_long(data, pos)
                shape.append(n)
        body, pos = _read_bytes(data, pos)
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} trailing bytes")
        return record_to_tensor({"dtype": dtype, "shape": shape, "data": body})

    @staticmethod
    def of(parsed: Any) -> TensorCodec | None:
        """The codec if ``parsed`` is the Tensor record with its logical type, else None."""
        if not isinstance(parsed, dict) or parsed.get("logicalType") != TENSOR_LOGICAL_TYPE:
            return None
        fields = [(f.get("name"), f.get("type")) for f in parsed.get("fields", ())]
        expected = [("dtype", "string"), ("shape", {"type": "array", "items": "long"}), ("data", "bytes")]
        return TensorCodec() if fields == expected else None


# --- schemas -------------------------------------------------------------------


_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def self_contained(schema: Any, named: dict[str, Any], namespace: str = "", *, logical_types: bool = False) -> Any:
    """The schema with every named type it references defined once, at first use
    (later uses stay names) — valid for any Avro parser, custom properties kept.
    ``logical_types`` marks ``trialog.Tensor`` with its logical type, for parsing here
    (the JSON that travels stays as written)."""
    defined: set[str] = set()

    def full(name: str, ns: str) -> str:
        return name if "." in name or not ns else f"{ns}.{name}"

    def walk(node: Any, ns: str) -> Any:
        if isinstance(node, str):
            if node in _PRIMITIVES:
                return node
            name = node if node in named else full(node, ns)
            if name in defined or name not in named:
                return name
            return walk(named[name], ns)
        if isinstance(node, list):
            return [walk(b, ns) for b in node]
        if not isinstance(node, dict):
            return node
        node = {k: v for k, v in node.items() if not k.startswith("__")}
        kind = node.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            own_ns = node.get("namespace", ns)
            name = full(node["name"], own_ns)
            defined.add(name)
            if name == TENSOR and logical_types:
                node["logicalType"] = TENSOR_LOGICAL_TYPE
            inner_ns = name.rpartition(".")[0]
            if kind in ("record", "error"):
                node["fields"] = [{**f, "type": walk(f["type"], inner_ns)} for f in node["fields"]]
            return node
        if kind == "array":
            return {**node, "items": walk(node["items"], ns)}
        if kind == "map":
            return {**node, "values": walk(node["values"], ns)}
        if isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind not in _PRIMITIVES):
            return {**node, "type": walk(kind, ns)}
        return node

    return walk(schema, namespace)


class Schema:
    """One parsed Avro schema with its fingerprint, ready to encode and decode."""

    __slots__ = ("name", "parsed", "canonical", "fingerprint", "header", "json", "flat", "own")

    def __init__(self, parsed: Any, json_text: str | None = None):
        self.parsed = parsed
        #: The self-contained schema as JSON text (custom properties kept), for the log and other languages.
        self.json = json_text
        self.name = _full_name(parsed)
        self.canonical = to_parsing_canonical_form(parsed)
        self.fingerprint = bytes.fromhex(fingerprint(self.canonical, "CRC-64-AVRO"))  # little-endian, as on the wire
        self.header = MAGIC + self.fingerprint
        if self.json is None:
            self.json = self.canonical
        #: Our own encoder and decoder when the schema is a flat record (trialog.protocol.codec_flat), else None.
        self.flat: FlatCodec | None = compile_flat(parsed)
        #: The encoder and decoder used instead of fastavro: the flat one, or the tensor one.
        self.own: FlatCodec | TensorCodec | None = self.flat or TensorCodec.of(parsed)

    def encode(self, value: Any) -> bytes:
        """Single-object encoding of ``value``; raises CodecError if it does not match."""
        if self.own is not None:
            try:
                return self.own.encode(value, self.header)
            except Exception as exc:
                raise CodecError(f"value does not match schema {self.name}: {_describe(exc)}") from exc
        buf = io.BytesIO()
        buf.write(self.header)
        try:
            fastavro.schemaless_writer(buf, self.parsed, value, strict_allow_default=True)
        except Exception as exc:
            raise CodecError(f"value does not match schema {self.name}: {_describe(exc)}") from exc
        return buf.getvalue()

    def decode_body(self, data: bytes | memoryview, offset: int, reader: Schema | None = None) -> Any:
        """Decode the Avro body starting at ``offset`` (after the single-object header)."""
        if self.own is not None and (reader is None or reader.fingerprint == self.fingerprint):
            try:
                return self.own.decode(data if type(data) is bytes else bytes(data), offset)
            except Exception as exc:
                raise CodecError(f"bytes do not decode as {self.name}: {_describe(exc)}") from exc
        buf = io.BytesIO(data)
        buf.seek(offset)
        try:
            if reader is None or reader.fingerprint == self.fingerprint:
                value = fastavro.schemaless_reader(buf, self.parsed)
            else:
                value = fastavro.schemaless_reader(buf, self.parsed, reader.parsed)
        except Exception as exc:
            raise CodecError(f"bytes do not decode as {self.name}: {_describe(exc)}") from exc
        if buf.tell() != len(data):
            raise CodecError(f"bytes do not decode as {self.name}: {len(data) - buf.tell()} trailing bytes")
        return value

    def __repr__(self) -> str:
        return f"Schema({self.name}, fingerprint={self.fingerprint.hex()})"


def _full_name(parsed: Any) -> str:
    if isinstance(parsed, dict):
        return parsed.get("name") or parsed.get("type", "?")
    if isinstance(parsed, list):
        return "union"
    return str(parsed)


def _describe(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) < 400 else text[:400] + "…"


class SchemaStore:
    """Every schema a process knows: writer schemas by fingerprint, reader schemas by name.

    Trialog's own schemas are loaded from ``schemas/``, and the earlier versions of
    those that evolved from ``schemas/previous/`` as writer schemas only (so records
    written before an upgrade still decode, resolved into the current version);
    actor-class schemas are added as trials start (they travel inside ``trial.started``).
    """

    def __init__(self) -> None:
        self._named: dict[str, Any] = {}
        self._by_fingerprint: dict[bytes, Schema] = {}
        self._by_name: dict[str, Schema] = {}
        self._by_text: dict[tuple[bool, str], Schema] = {}

    @classmethod
    def with_builtin(cls) -> SchemaStore:
        store = cls()
        store.load_dir(schemas_dir())
        if (schemas_dir() / "previous").is_dir():
            store.load_dir(schemas_dir() / "previous", reader=False)
        return store

    def load_dir(self, folder: Path, *, reader: bool = True) -> list[Schema]:
        """Register every ``.avsc`` file of a folder, in whatever order their references need
        (``reader=False``: as writer schemas only, e.g. earlier versions)."""
        pending = {p: json.loads(p.read_text()) for p in sorted(Path(folder).glob("*.avsc"))}
        loaded: list[Schema] = []
        while pending:
            progress = False
            for path, raw in list(pending.items()):
                try:
                    loaded.append(self.register(raw, reader=reader))
                except CodecError as exc:
                    if "unknown type" not in str(exc).lower():
                        raise CodecError(f"{path.name}: {exc}") from exc
                    continue
                del pending[path]
                progress = True
            if not progress:
                names = ", ".join(p.name for p in pending)
                raise CodecError(f"schemas refer to types that no file defines: {names}")
        return loaded

    def register(self, schema: Any, *, reader: bool = True) -> Schema:
        """Parse and remember a schema (dict, JSON text or type name).

        ``reader=True`` makes it the schema values of its name decode *into* (the
        newest one wins), which is how an application upgrades its reading side.
        """
        text = schema if isinstance(schema, str) else None
        if text is not None and (reader, text) in self._by_text:
            # Every trial.started carries its classes' schemas: parsing and fingerprinting
            # them again per trial costs ~1 ms each.
            compiled = self._by_text[(reader, text)]
            if reader:
                self._by_name[compiled.name] = compiled
            return compiled
        if isinstance(schema, str) and schema.lstrip().startswith(("{", "[", '"')):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as exc:
                raise CodecError(f"schema is not valid JSON: {exc}") from exc
        named = dict(self._named)
        try:
            fastavro.parse_schema(schema, named_schemas=named)  # validates, and collects the named types it defines
        except Exception as exc:
            raise CodecError(f"invalid Avro schema: {_describe(exc)}") from exc
        # Fingerprints need the canonical form of the *self-contained* schema: fastavro
        # leaves references to earlier named types unexpanded, which other Avro
        # implementations would fingerprint differently.
        standalone = self_contained(schema, named)
        parsed = fastavro.parse_schema(self_contained(schema, named, logical_types=True), named_schemas={})
        compiled = Schema(parsed, json.dumps(standalone, separators=(",", ":"), sort_keys=True))
        # Two schemas may share a fingerprint yet differ in custom properties (which the
        # canonical form drops): each registration keeps its own JSON.
        self._by_fingerprint.setdefault(compiled.fingerprint, compiled)
        # Named types defined here become usable by later schemas (latest definition wins).
        self._named.update({k: v for k, v in named.items() if k not in self._named or reader})
        if reader:
            self._by_name[compiled.name] = compiled
        if text is not None:
            self._by_text[(reader, text)] = compiled
        return compiled

    def get(self, name: str) -> Schema:
        try:
            return self._by_name[name]
        except KeyError:
            raise CodecError(f"unknown schema {name!r}; known: {', '.join(sorted(self._by_name)) or 'none'}") from None

    def by_fingerprint(self, fp: bytes) -> Schema:
        try:
            return self._by_fingerprint[fp]
        except KeyError:
            raise CodecError(f"unknown schema fingerprint {bytes(fp).hex()}") from None

    def writer_of(self, data: bytes | memoryview) -> Schema:
        """The writer schema of a single-object-encoded value."""
        if len(data) < HEADER_SIZE or bytes(data[:2]) != MAGIC:
            raise CodecError("not an Avro single-object encoding (bad marker bytes)")
        return self.by_fingerprint(bytes(data[2:HEADER_SIZE]))

    def decode(self, data: bytes | memoryview, reader: Schema | str | None = None) -> Any:
        """Decode a single-object-encoded value, resolved into ``reader`` (default: the
        newest schema registered under the writer's name)."""
        if type(reader) is Schema and type(data) is bytes and reader.own is not None and data.startswith(reader.header):
            # decode_with_writer's first case, two calls shallower: every payload a replay or a
            # learner folds comes this way (its class's schema, encoded by our own codec).
            try:
                return reader.own.decode(data, HEADER_SIZE)
            except Exception as exc:
                raise CodecError(f"bytes do not decode as {reader.name}: {_describe(exc)}") from exc
        return self.decode_with_writer(data, reader)[1]

    def decode_with_writer(self, data: bytes | memoryview, reader: Schema | str | None = None) -> tuple[Schema, Any]:
        """Like :meth:`decode`, also returning the writer schema (one lookup, not two)."""
        if data is None:
            raise CodecError("no bytes to decode (empty record value)")
        if type(reader) is Schema and type(data) is bytes and data.startswith(reader.header):
            # Written with the reader itself (a trial's payloads, unless their class changed since):
            # the header names it, so no lookup of the writer by its fingerprint.
            return reader, reader.decode_body(data, HEADER_SIZE, reader)
        writer = self.writer_of(data)
        if isinstance(reader, str):
            reader = self.get(reader)
        if reader is None:
            reader = self._by_name.get(writer.name, writer)
        return writer, writer.decode_body(data, HEADER_SIZE, reader)

    def encode(self, name: str, value: Any) -> bytes:
        return self.get(name).encode(value)
