"""Gymnasium spaces as Avro schemas, and values converted both ways (the mapping itself is
:mod:`trialog.protocol.spaces`, where a spec's actor classes reach it too; this module adds
what only hosting an env needs: a space inferred from a first observation).

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

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from trialog.errors import SpecError
from trialog.protocol.spaces import (
    SUPPORTED_SPACES,
    SpaceCodec,
    as_json,
    avro_name,
    default_value,
    space_codec,
)

__all__ = ["SUPPORTED_SPACES", "SpaceCodec", "as_json", "avro_name", "default_value", "infer_space", "space_codec"]


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
