"""Gymnasium spaces as Avro schemas, and values converted both ways.

An adapter turns each agent's observation and action space into a
:class:`SpaceCodec`: the Avro schema of the actor class, a JSON description of
the space (what a random actor needs to sample valid actions), and two
conversions — env value → payload value (what :meth:`trialog.protocol.codec.Schema.encode`
takes) and decoded payload value → env value.

=============== ============================================ =========================
space           Avro                                         payload value
=============== ============================================ =========================
Box             ``trialog.Tensor``                           ndarray of the Box's dtype
Discrete        ``long`` (the value itself: ``start`` kept)  int
MultiDiscrete   ``trialog.Tensor``                           ndarray (int64 by default)
MultiBinary     ``trialog.Tensor``                           ndarray (int8)
Dict            record, keys sanitized to Avro field names   dict by field name
Tuple           record with fields ``item0``, ``item1`` …    dict by field name
Text            ``string``                                   str
=============== ============================================ =========================

Every other space (Sequence, Graph, OneOf, custom ones) is refused with a
:class:`~trialog.errors.SpecError` naming the space and where it was found.

Record names are ``<namespace>.<Observation|Action>[_<path>]``: the adapter picks
the namespace from the environment's name and the actor class, so names are
deterministic and do not clash between classes or environments.

The space description travels as the custom property ``trialog.space`` on the
outermost schema object (records, ``long``, ``string``). Avro ignores unknown
properties, and they are not part of the parsing canonical form, so they do
not change the schema's fingerprint. A bare ``trialog.Tensor`` reference has no
object to carry it; adapters return the description beside the schema too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from trialog.errors import SpecError
from trialog.protocol.codec import SUPPORTED_DTYPES, TENSOR
from trialog.protocol.spaces import SPACE_PROPERTY

SUPPORTED_SPACES = ("Box", "Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple", "Text")

Convert = Callable[[Any], Any]


@dataclass(frozen=True)
class SpaceCodec:
    """One space's Avro schema, JSON description, and conversions both ways."""

    space: spaces.Space
    schema: Any
    description: dict[str, Any]
    to_payload: Convert
    from_payload: Convert


def space_codec(space: spaces.Space, *, namespace: str, name: str, where: str) -> SpaceCodec:
    """Map ``space`` to Avro; ``where`` names it in errors ("action space of agent 0")."""
    schema, description, to_payload, from_payload = _build(
        space, f"{avro_name(namespace, dotted=True)}.{avro_name(name)}", where
    )
    if isinstance(schema, dict):
        schema = {**schema, SPACE_PROPERTY: description}
    elif schema != TENSOR:  # a bare primitive: give it an object to carry the description
        schema = {"type": schema, SPACE_PROPERTY: description}
    return SpaceCodec(space, schema, description, to_payload, from_payload)


def avro_name(text: str, *, dotted: bool = False) -> str:
    """``text`` as a valid Avro name (or dotted namespace): invalid characters become ``_``."""
    if dotted:
        return ".".join(avro_name(part) for part in str(text).split(".") if part) or "_"
    name = re.sub(r"[^A-Za-z0-9_]", "_", str(text))
    return name if name and not name[0].isdigit() else f"_{name}"


def default_value(space: spaces.Space) -> Any:
    """A fixed member of ``space`` (an env value): what an actor that misses its response
    timeout is given when the space is all the spec says. The value nearest to zero, so
    that a "do nothing" action, where a space has one there, is chosen: Discrete's
    ``start``, a Box's 0 clipped into its bounds, no bits set, the shortest text."""
    match space:
        case spaces.Discrete():
            return int(space.start)
        case spaces.Box():
            return np.clip(np.zeros(space.shape), space.low, space.high).astype(space.dtype)
        case spaces.MultiDiscrete():
            return np.asarray(space.start, dtype=space.dtype)
        case spaces.MultiBinary():
            return np.zeros(np.atleast_1d(space.n), dtype=np.int8)
        case spaces.Dict():
            return {key: default_value(sub) for key, sub in space.spaces.items()}
        case spaces.Tuple():
            return tuple(default_value(sub) for sub in space.spaces)
        case spaces.Text():
            return min(space.character_set) * int(space.min_length)
    raise SpecError(
        f"{space!r} ({type(space).__name__}) has no Avro mapping in Trialog; supported: {', '.join(SUPPORTED_SPACES)}"
    )


def as_json(payload: Any) -> Any:
    """A payload value as JSON can carry it (a spec's ``default_action`` travels as JSON in
    ``trial.started``): arrays as nested lists; the codec reads lists back as tensors."""
    if isinstance(payload, np.ndarray):
        return payload.tolist()
    if isinstance(payload, Mapping):
        return {key: as_json(value) for key, value in payload.items()}
    return payload.item() if isinstance(payload, np.generic) else payload


def infer_space(value: Any, *, where: str) -> spaces.Space:
    """A space that holds ``value``, for environments that declare none.

    Arrays become unbounded Boxes of their shape and dtype (integers bounded by
    their dtype), dicts Dicts, tuples Tuples, strings Text, booleans Discrete(2),
    and other Python or NumPy scalars 0-d Boxes. Later values must keep the same
    structure, shape and dtype.
    """
    if isinstance(value, Mapping):
        return spaces.Dict({k: infer_space(v, where=f"{where}[{k!r}]") for k, v in value.items()})
    if isinstance(value, tuple):
        return spaces.Tuple([infer_space(v, where=f"{where}[{i}]") for i, v in enumerate(value)])
    if isinstance(value, str):
        return spaces.Text(max_length=max(1024, len(value)))
    if isinstance(value, (bool, np.bool_)):
        return spaces.Discrete(2)
    arr = np.asarray(value)
    if arr.dtype.kind in "iu":
        info = np.iinfo(arr.dtype)
        return spaces.Box(info.min, info.max, shape=arr.shape, dtype=arr.dtype)
    if arr.dtype.kind == "f":
        return spaces.Box(-np.inf, np.inf, shape=arr.shape, dtype=arr.dtype)
    if arr.dtype.kind == "b":
        return spaces.Box(False, True, shape=arr.shape, dtype=np.bool_)
    raise SpecError(
        f"{where}: cannot infer a space from {type(value).__name__} values (dtype {arr.dtype}); "
        "declare observation_space(agent)"
    )


# --- the mapping ---------------------------------------------------------------


def _build(space: spaces.Space, name: str, where: str) -> tuple[Any, dict, Convert, Convert]:
    match space:
        case spaces.Box():
            return _box(space, where)
        case spaces.Discrete():
            start, n = int(space.start), int(space.n)
            return "long", {"type": "Discrete", "n": n, "start": start}, int, int
        case spaces.MultiDiscrete():
            dtype = _tensor_dtype(space.dtype, space, where)
            description = {
                "type": "MultiDiscrete",
                "nvec": space.nvec.tolist(),
                "start": space.start.tolist(),
                "dtype": dtype.name,
            }
            return TENSOR, description, _as_array(dtype), _as_array(dtype)
        case spaces.MultiBinary():
            shape = [int(n) for n in np.atleast_1d(space.n)]
            return (
                TENSOR,
                {"type": "MultiBinary", "shape": shape},
                _as_array(np.dtype(np.int8)),
                _as_array(np.dtype(np.int8)),
            )
        case spaces.Dict():
            return _dict(space, name, where)
        case spaces.Tuple():
            return _tuple(space, name, where)
        case spaces.Text():
            description = {
                "type": "Text",
                "min_length": int(space.min_length),
                "max_length": int(space.max_length),
                "charset": "".join(sorted(space.character_set)),
            }
            return "string", description, str, str
    raise SpecError(
        f"{where}: {space!r} ({type(space).__name__}) has no Avro mapping in Trialog; "
        f"supported spaces: {', '.join(SUPPORTED_SPACES)}. Wrap the environment to expose one of those."
    )


def _box(space: spaces.Box, where: str) -> tuple[Any, dict, Convert, Convert]:
    dtype = _tensor_dtype(space.dtype, space, where)
    description = {
        "type": "Box",
        "shape": list(space.shape),
        "dtype": dtype.name,
        "low": _bound(space.low),
        "high": _bound(space.high),
    }
    return TENSOR, description, _as_array(dtype), _as_array(dtype)


def _tensor_dtype(dtype: Any, space: spaces.Space, where: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.name not in SUPPORTED_DTYPES:
        raise SpecError(
            f"{where}: {space!r} has dtype {dtype.name}, which a trialog.Tensor cannot carry; "
            f"supported: {', '.join(SUPPORTED_DTYPES)}"
        )
    return dtype


def _bound(values: np.ndarray) -> Any:
    """A Box bound as JSON: one number when uniform, else nested lists; infinities
    as null, since JSON has none."""
    arr = np.asarray(values)
    flat = [None if isinstance(v, float) and not math.isfinite(v) else v for v in arr.ravel().tolist()]
    if flat and all(v == flat[0] for v in flat):
        return flat[0]
    return np.array(flat, dtype=object).reshape(arr.shape).tolist()


def _as_array(dtype: np.dtype) -> Convert:
    return lambda value: np.asarray(value, dtype=dtype)


def _dict(space: spaces.Dict, name: str, where: str) -> tuple[Any, dict, Convert, Convert]:
    fields, described, parts = [], [], []
    for key, sub in space.spaces.items():
        field = avro_name(key)
        while any(f["name"] == field for f in fields):  # keys that sanitize alike ("a-b", "a_b") stay apart
            field += "_"
        schema, description, to_payload, from_payload = _build(sub, f"{name}_{field}", f"{where}[{key!r}]")
        fields.append({"name": field, "type": schema})
        described.append({"name": field, "key": key, "space": description})
        parts.append((key, field, to_payload, from_payload))

    def to_record(value: Mapping[Any, Any]) -> dict[str, Any]:
        return {field: conv(value[key]) for key, field, conv, _ in parts}

    def from_record(value: Mapping[str, Any]) -> dict[Any, Any]:
        return {key: conv(value[field]) for key, field, _, conv in parts}

    return (
        {"type": "record", "name": name, "fields": fields},
        {"type": "Dict", "fields": described},
        to_record,
        from_record,
    )


def _tuple(space: spaces.Tuple, name: str, where: str) -> tuple[Any, dict, Convert, Convert]:
    built = [_build(sub, f"{name}_item{i}", f"{where}[{i}]") for i, sub in enumerate(space.spaces)]
    fields = [{"name": f"item{i}", "type": schema} for i, (schema, _, _, _) in enumerate(built)]

    def to_record(value: Any) -> dict[str, Any]:
        return {f"item{i}": b[2](v) for i, (b, v) in enumerate(zip(built, value, strict=True))}

    def from_record(value: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(b[3](value[f"item{i}"]) for i, b in enumerate(built))

    description = {"type": "Tuple", "items": [b[1] for b in built]}
    return {"type": "record", "name": name, "fields": fields}, description, to_record, from_record
