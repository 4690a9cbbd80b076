"""Spaces as the protocol carries them: Gymnasium spaces as Avro schemas, and random valid
actions drawn from them.

**Gymnasium spaces as Avro.** :func:`space_codec` maps a space to a :class:`SpaceCodec`:
the Avro schema of an actor class's observation or action, a JSON description of the space,
and conversions both ways between env values and payload values (the table and the rules in
:mod:`trialog.adapters.spaces` and docs/environments.md). The adapters, environments that
declare their spaces (:mod:`trialog.adapters.declared`) and a spec's actor classes
(``observation: {space: module:NAME}``, :mod:`trialog.spec`) all derive their schemas here.
Gymnasium (the ``envs`` extra) is imported only when a space is mapped.

**Sampling.** An action schema says what its actions are by the custom property ``trialog.space``
(:data:`SPACE_PROPERTY`: a JSON description such as ``{"type": "Discrete", "n": 3}``,
written by :func:`space_codec`); an observation may
carry an ``action_mask`` field (:data:`ACTION_MASK`) that says which Discrete actions
are allowed. :func:`sample_action` draws a random valid action from such a
description: the sampler behind the environment contract check's random actions
(:mod:`trialog.tools.check`) and the shipped random actor
(:mod:`trialog.agents.random_agent`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from trialog.errors import SpecError, TrialogError
from trialog.protocol.codec import SUPPORTED_DTYPES, TENSOR

if TYPE_CHECKING:
    from gymnasium import spaces

SPACE_PROPERTY = "trialog.space"
ACTION_MASK = "action_mask"


def action_space_of(schema: Any) -> dict[str, Any]:
    """The space description an action schema carries (``trialog.space``), or one
    derived from plain Avro where that is enough (enum, boolean, records of them)."""
    if isinstance(schema, str) and schema.lstrip().startswith("{"):
        schema = json.loads(schema)
    if isinstance(schema, Mapping):
        if SPACE_PROPERTY in schema:
            return dict(schema[SPACE_PROPERTY])
        kind = schema.get("type")
        if kind == "enum":
            return {"type": "Enum", "symbols": list(schema["symbols"])}
        if kind == "record":
            fields = [{"name": f["name"], "space": action_space_of(f["type"])} for f in schema["fields"]]
            return {"type": "Dict", "fields": fields}
        if isinstance(kind, (str, Mapping)) and len(schema) == 1:
            return action_space_of(kind)
    if schema == "boolean":
        return {"type": "Boolean"}
    raise TrialogError(
        f"cannot sample actions for schema {json.dumps(schema)[:200]}: it has no {SPACE_PROPERTY!r} property "
        "(adapters add one; a hand-written schema can too, "
        'e.g. {"type": "long", "trialog.space": {"type": "Discrete", "n": 3}})'
    )


def sample_action(space: Mapping[str, Any], rng: np.random.Generator, observation: Any = None) -> Any:
    """A random valid action (payload value) for a space description.

    For a Discrete space, an ``action_mask`` in the observation (a record field)
    limits the choice to the allowed actions; an all-zero mask (not this actor's
    turn) allows any.
    """
    mask = observation.get(ACTION_MASK) if isinstance(observation, Mapping) else None
    return _sample(space, rng, mask)


def _sample(space: Mapping[str, Any], rng: np.random.Generator, mask: Any = None) -> Any:
    match space["type"]:
        case "Discrete":
            n, start = int(space["n"]), int(space.get("start", 0))
            allowed = np.flatnonzero(np.asarray(mask).ravel()[:n]) if mask is not None else ()
            return start + int(rng.choice(allowed) if len(allowed) else rng.integers(n))
        case "Box":
            return _sample_box(space, rng)
        case "MultiDiscrete":
            nvec = np.asarray(space["nvec"], dtype=np.int64)
            start = np.asarray(space.get("start", 0), dtype=np.int64)
            return (start + rng.integers(0, nvec)).astype(space.get("dtype", "int64"))
        case "MultiBinary":
            return rng.integers(0, 2, size=tuple(space["shape"]), dtype=np.int8)
        case "Dict":
            return {f["name"]: _sample(f["space"], rng) for f in space["fields"]}
        case "Tuple":
            return {f"item{i}": _sample(item, rng) for i, item in enumerate(space["items"])}
        case "Text":
            length = int(rng.integers(space.get("min_length", 1), space.get("max_length", 16) + 1))
            return "".join(rng.choice(list(space["charset"]), size=length))
        case "Enum":
            return str(rng.choice(space["symbols"]))
        case "Boolean":
            return bool(rng.integers(2))
    raise TrialogError(f"cannot sample from a space of type {space['type']!r}")


def _sample_box(space: Mapping[str, Any], rng: np.random.Generator) -> np.ndarray:
    shape, dtype = tuple(space["shape"]), np.dtype(space["dtype"])
    low = np.broadcast_to(_bound(space.get("low"), -math.inf), shape)
    high = np.broadcast_to(_bound(space.get("high"), math.inf), shape)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(np.int64)
        low = np.clip(np.nan_to_num(low, neginf=info.min), info.min, info.max).astype(np.int64)
        high = np.clip(np.nan_to_num(high, posinf=info.max), info.min, info.max).astype(np.int64)
        return rng.integers(low, high, endpoint=True, size=shape).astype(dtype)
    # As gymnasium samples a Box: uniform when bounded, shifted exponential when
    # bounded on one side, normal when unbounded.
    below, above = np.isfinite(low), np.isfinite(high)
    value = rng.normal(size=shape)
    value = np.where(below & ~above, low + rng.exponential(size=shape), value)
    value = np.where(~below & above, high - rng.exponential(size=shape), value)
    value = np.where(below & above, rng.uniform(np.where(below, low, 0), np.where(above, high, 1), size=shape), value)
    return value.astype(dtype)


def _bound(value: Any, default: float) -> np.ndarray:
    """A bound from a space description: numbers, nested lists, null for infinite."""
    arr = np.asarray(value if value is not None else default, dtype=object)
    # Elementwise (`is None` would ask of the array itself): null stands for infinity.
    return np.where(arr == None, default, arr).astype(np.float64)  # noqa: E711


# --- Gymnasium spaces as Avro schemas ------------------------------------------

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

    def contains(self, value: Any) -> bool:
        """Whether ``value``, as :attr:`from_payload` makes it, is in the space. A Discrete
        space's int is checked here: gymnasium's check costs ~5 µs, and an environment
        checks every action it applies."""
        described = self.description
        if type(value) is int and described["type"] == "Discrete":
            return described["start"] <= value < described["start"] + described["n"]
        return bool(self.space.contains(value))


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
    from gymnasium import spaces

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


# --- the mapping: Gymnasium space -> Avro ---------------------------------------------------------------


def _build(space: spaces.Space, name: str, where: str) -> tuple[Any, dict, Convert, Convert]:
    from gymnasium import spaces

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
        "low": _bound_json(space.low),
        "high": _bound_json(space.high),
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


def _bound_json(values: np.ndarray) -> Any:
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
