"""Action spaces as the protocol carries them, and random valid actions drawn from them.

An action schema says what its actions are by the custom property ``trialog.space``
(:data:`SPACE_PROPERTY`: a JSON description such as ``{"type": "Discrete", "n": 3}``,
written by the adapters, see :mod:`trialog.adapters.spaces`); an observation may
carry an ``action_mask`` field (:data:`ACTION_MASK`) that says which Discrete actions
are allowed. :func:`sample_action` draws a random valid action from such a
description: the sampler behind the environment contract check's random actions
(:mod:`trialog.tools.check`) and the shipped random actor
(:mod:`trialog.agents.random_agent`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from trialog.errors import TrialogError

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
