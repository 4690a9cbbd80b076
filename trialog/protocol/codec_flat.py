"""Avro binary encoding of *flat* records, written out in Python for speed.

Every record on the tick path (observations, actions, rewards, timeouts...) has a
schema that is a record of primitive fields and ``["null", T]`` unions. For such small
records fastavro's per-call set-up costs more than the encoding itself (measured on an
observation: 4.3 µs to encode through ``schemaless_writer``, 1.8 µs here; 3.1 µs to
decode through ``schemaless_reader``, 2.1 µs here), and every record a service writes
or reads pays it. :class:`trialog.protocol.codec.Schema` uses
:func:`compile_flat` when a schema qualifies and fastavro otherwise (nested records,
arrays, maps, enums, fixed, logical types, and decoding into a different reader
schema).

The bytes are the Avro specification's binary encoding, the same as fastavro's
(``tests/unit/test_codec_flat.py`` checks both ways on random values). Decoding is
strict where Avro leaves room: a boolean byte other than 0 or 1, a union branch out
of range, a varint longer than 10 bytes, a length past the end, invalid UTF-8 and
trailing bytes are all errors (:class:`ValueError` here; the caller wraps it in
``CodecError``).
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable
from typing import Any

Encoder = Callable[[Any], bytes]
Decoder = Callable[[bytes, int], tuple[Any, int]]

_INT_RANGE = {"int": (-(1 << 31), (1 << 31) - 1), "long": (-(1 << 63), (1 << 63) - 1)}
_ONE_BYTE = [bytes([(n << 1) if n >= 0 else ((-n << 1) - 1)]) for n in range(-64, 64)]  # zigzag of -64..63
_F32, _F64 = struct.Struct("<f"), struct.Struct("<d")
_MISSING = object()


def varint(n: int) -> bytes:
    """Zigzag varint of a long already known to be in range."""
    if -64 <= n < 64:
        return _ONE_BYTE[n + 64]
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _integer(kind: str) -> Encoder:
    low, high = _INT_RANGE[kind]

    def encode(x: Any) -> bytes:
        n = operator.index(x)  # ints, bools and NumPy integers; not floats or strings
        if -64 <= n < 64:  # one byte: most ticks, flags and lengths (a call saved per field)
            return _ONE_BYTE[n + 64]
        if not low <= n <= high:
            raise ValueError(f"{n} is out of range for an Avro {kind}")
        return varint(n)

    return encode


def _sized(b: bytes) -> bytes:
    """Avro's length-prefixed bytes (strings and bytes alike)."""
    return varint(len(b)) + b


def _string(x: Any) -> bytes:
    if not isinstance(x, str):
        raise TypeError(f"expected a string, got {type(x).__name__}")
    return _sized(x.encode())


def _bytes(x: Any) -> bytes:
    if not isinstance(x, (bytes, bytearray, memoryview)):
        raise TypeError(f"expected bytes, got {type(x).__name__}")
    return _sized(bytes(x))


def _boolean(x: Any) -> bytes:
    return b"\x01" if x else b"\x00"


def _float(x: Any) -> bytes:
    if isinstance(x, (str, bytes)):
        raise TypeError(f"expected a number, got {type(x).__name__}")
    return _F32.pack(x)


def _double(x: Any) -> bytes:
    if isinstance(x, (str, bytes)):
        raise TypeError(f"expected a number, got {type(x).__name__}")
    return _F64.pack(x)


def _null(x: Any) -> bytes:
    if x is not None:
        raise TypeError(f"expected null, got {type(x).__name__}")
    return b""


_ENCODERS: dict[str, Encoder] = {
    "null": _null, "boolean": _boolean, "int": _integer("int"), "long": _integer("long"),
    "float": _float, "double": _double, "bytes": _bytes, "string": _string,
}  # fmt: skip


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    c = data[pos + 1]
    if c < 0x80:  # two bytes (sizes of 64 B to 8 KB): no loop
        z = (b & 0x7F) | (c << 7)
        return (z >> 1) ^ -(z & 1), pos + 2
    z, shift = (b & 0x7F) | ((c & 0x7F) << 7), 14
    pos += 1
    while True:
        pos += 1
        b = data[pos]
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos + 1
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _read_integer(kind: str) -> Decoder:
    low, high = _INT_RANGE[kind]

    def decode(data: bytes, pos: int) -> tuple[int, int]:
        b = data[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        n, pos = read_varint(data, pos)
        if not low <= n <= high:
            raise ValueError(f"{n} is out of range for an Avro {kind}")
        return n, pos

    return decode


def _read_sized(data: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = read_varint(data, pos)
    end = pos + n
    if n < 0 or end > len(data):
        raise ValueError(f"a length of {n} bytes at offset {pos} runs past the end ({len(data)} bytes)")
    return data[pos:end], end


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    raw, pos = _read_sized(data, pos)
    return raw.decode(), pos  # strict: invalid UTF-8 raises


def _read_boolean(data: bytes, pos: int) -> tuple[bool, int]:
    b = data[pos]
    if b > 1:
        raise ValueError(f"boolean byte {b} is neither 0 nor 1")
    return b == 1, pos + 1


def _read_fixed(unpack: struct.Struct) -> Decoder:
    size = unpack.size

    def decode(data: bytes, pos: int) -> tuple[float, int]:
        end = pos + size
        if end > len(data):
            raise ValueError("a number runs past the end")
        return unpack.unpack_from(data, pos)[0], end

    return decode


def _read_null(data: bytes, pos: int) -> tuple[None, int]:
    return None, pos


_DECODERS: dict[str, Decoder] = {
    "null": _read_null, "boolean": _read_boolean, "int": _read_integer("int"), "long": _read_integer("long"),
    "float": _read_fixed(_F32), "double": _read_fixed(_F64), "bytes": _read_sized, "string": _read_string,
}  # fmt: skip


def _union(branches: list[str]) -> tuple[Encoder, Decoder]:
    """``["null", T]`` or ``[T, "null"]``: None takes the null branch, anything else T's."""
    null_index = branches.index("null")
    other = branches[1 - null_index]
    null_tag, other_tag = varint(null_index), varint(1 - null_index)
    encode_other, decode_other = _ENCODERS[other], _DECODERS[other]

    def encode(x: Any) -> bytes:
        return null_tag if x is None else other_tag + encode_other(x)

    def decode(data: bytes, pos: int) -> tuple[Any, int]:
        index, pos = read_varint(data, pos)
        if index == null_index:
            return None, pos
        if index == 1 - null_index:
            return decode_other(data, pos)
        raise ValueError(f"union branch {index} does not exist")

    return encode, decode


def primitive(kind: str) -> tuple[Encoder, Decoder]:
    """The encoder and decoder of one primitive type, for codecs made of them (the tensor's)."""
    return _ENCODERS[kind], _DECODERS[kind]


def _field_codec(kind: Any) -> tuple[Encoder, Decoder] | None:
    if isinstance(kind, str) and kind in _ENCODERS:
        return _ENCODERS[kind], _DECODERS[kind]
    if (
        isinstance(kind, list)
        and len(kind) == 2
        and "null" in kind
        and all(isinstance(k, str) and k in _ENCODERS for k in kind)
        and kind[0] != kind[1]
    ):
        return _union(kind)
    return None


class FlatCodec:
    """Encoder and decoder of one flat record schema (see the module docstring)."""

    __slots__ = ("names", "encoders", "defaults", "decoders", "_named_decoders")

    def __init__(self, fields: list[tuple[str, Encoder, Decoder, Any]]):
        """``fields``: (name, encoder, decoder, default or _MISSING) in schema order."""
        self.names = [name for name, _, _, _ in fields]
        self.encoders = tuple(encode for _, encode, _, _ in fields)
        self.decoders = tuple(decode for _, _, decode, _ in fields)
        self.defaults = tuple(default for _, _, _, default in fields)
        self._named_decoders = tuple(zip(self.names, self.decoders))

    def encode(self, value: Any, header: bytes) -> bytes:
        """``header`` followed by the Avro body of ``value`` (a mapping of field names).
        Raises ValueError, TypeError or KeyError if ``value`` does not match."""
        parts = [header]
        for name, encode, default in zip(self.names, self.encoders, self.defaults):
            x = value.get(name, default)
            if x is _MISSING:
                raise KeyError(f"no value for field {name!r}, which has no default")
            parts.append(encode(x))
        return b"".join(parts)

    def encode_row(self, row: tuple, header: bytes) -> bytes:
        """Like :meth:`encode`, from every field's value in schema order (no mapping to build)."""
        parts = [header]
        for encode, x in zip(self.encoders, row):
            parts.append(encode(x))
        return b"".join(parts)

    def decode_row(self, data: bytes, pos: int) -> list[Any]:
        """Every field's value in schema order; errors as :meth:`decode`."""
        out = []
        for decode in self.decoders:
            x, pos = decode(data, pos)
            out.append(x)
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} trailing bytes")
        return out

    def decode(self, data: bytes, pos: int) -> dict[str, Any]:
        """The record whose body starts at ``pos`` and ends the data. Raises ValueError or
        IndexError on bytes that are not such a record."""
        out = {}  # filled field by field: no row list, no zip (a replay decodes two payloads a step)
        for name, decode in self._named_decoders:
            out[name], pos = decode(data, pos)
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} trailing bytes")
        return out


def compile_flat(parsed: Any) -> FlatCodec | None:
    """A :class:`FlatCodec` for a parsed (fastavro) record schema of primitive fields and
    ``["null", T]`` unions without logical types, or None for any other schema."""
    if not isinstance(parsed, dict) or parsed.get("type") != "record" or "logicalType" in parsed:
        return None
    fields = []
    for field in parsed.get("fields", ()):
        kind = field["type"]
        codec = _field_codec(kind)
        first = kind[0] if isinstance(kind, list) else kind
        if codec is None or ("default" in field and first == "bytes"):
            return None  # bytes defaults are JSON strings in Avro: left to fastavro to convert
        fields.append((field["name"], *codec, field.get("default", _MISSING)))
    return FlatCodec(fields)
