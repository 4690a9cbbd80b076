"""Observations and actions read in place: the tick's records, nearly every record of a trial.

A record's body is compared with what its key and headers say, as Avro writes them, and its
other fields are read where they lie, without decoding it into a row first and then checking
the headers against the event (:meth:`trialog.protocol.event_codec.EventCodec.decode`, then
:func:`trialog.protocol.owners.check_headers`): on the records a service acts on, that pair
costs twice a tag check; read this way, less than half of it.

A body is read this way only if it is what that pair would decode and accept — the current
schema's fingerprint, the record key as its trial ID, the tick and actor header encoded in the
body as Avro writes them, every other header what the body says, every other field well formed
and nothing after them — and the fields are those the pair would give. For any other record
(an older schema, a header that does not match, bytes that do not decode) the readers return
None and the caller takes the general way, which says what is wrong with it. Tags are the
caller's to check first. ``tests/unit/test_in_place.py`` holds both ways to the same answer on
logged records and on records altered in every way this reading could miss.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

from trialog.errors import CodecError
from trialog.protocol.codec import Schema, SchemaStore
from trialog.protocol.codec_flat import read_varint, varint
from trialog.protocol.events import (
    HEADER_ID,
    HEADER_KIND,
    HEADER_RECEIVER,
    HEADER_REWARD,
    HEADER_SENDER,
    HEADER_TICK,
    Action,
    Observation,
)
from trialog.protocol.rewards import reward_bounds_problem

OBSERVATION, ACTION = Observation.KIND.encode(), Action.KIND.encode()
_ENVIRONMENT = Observation.SENDER.encode()
_OBSERVATION_FIELDS = [
    ("trial_id", "string"), ("tick", "long"), ("actor", "string"), ("payload", "bytes"),
    ("terminated", "boolean"), ("truncated", "boolean"), ("final", "boolean"), ("reward", ["null", "double"]),
]  # fmt: skip
_ACTION_FIELDS = [("trial_id", "string"), ("tick", "long"), ("actor", "string"), ("payload", "bytes"),
                  ("policy_version", ["null", "long"])]  # fmt: skip
_DOUBLE = struct.Struct("<d")  # Avro's double: 8 bytes, little-endian
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_UNSEEN = object()

# What an observation's body holds: (tick, actor, payload, terminated, truncated, final, reward)
ObservationFields = tuple[int, str, bytes, bool, bool, bool, "float | None"]
# What an action's body holds: (tick, actor, payload, policy_version)
ActionFields = tuple[int, str, bytes, "int | None"]


class TickBodies:
    """Reads observations' and actions' bodies in place (see the module's docstring); the
    replay's and the learner's folds (:class:`trialog.datalog.replay.Feeder`) and every service
    loop's checks (:class:`trialog.runtime.service.ServiceLoop`) use one."""

    CACHED = 100_000  # entries per cache below: keys and headers are untrusted input

    def __init__(self, store: SchemaStore):
        self.observation_schema = _tick_schema(store, Observation, _OBSERVATION_FIELDS)
        self.action_schema = _tick_schema(store, Action, _ACTION_FIELDS)
        # Per schema read here (observations', actions'): key -> the schema header + the key as an Avro string
        self._heads: dict[bytes, dict[bytes | None, bytes | None]] = {
            schema.header: {} for schema in (self.observation_schema, self.action_schema) if schema is not None
        }
        self._ticks: dict[bytes | None, tuple[int, bytes] | None] = {}  # tick header -> (tick, as an Avro long)
        self._names: dict[bytes | None, tuple[str, bytes] | None] = {}  # name header -> (name, as an Avro string)

    def event(
        self, key: bytes | None, h: dict[str, bytes], value: Any, kind: str | None
    ) -> Observation | Action | None:
        """The observation or action the record holds, as decoding it as ``kind`` and checking
        its headers would give it; None for any other record, or one this reading does not
        take. ``h``: the record's headers as a dict (the last of a name counts); ``kind``: the
        kind its reader took from them (the first of a name): one record, one kind."""
        if type(value) is not bytes:
            return None
        header = h.get(HEADER_KIND)
        if header == OBSERVATION and kind == Observation.KIND:
            read = self.observation(key, h, value)
            return None if read is None else Observation(key.decode(), *read)  # type: ignore[union-attr]
        if header == ACTION and kind == Action.KIND:
            read = self.action(key, h, value)
            return None if read is None else Action(key.decode(), *read)  # type: ignore[union-attr]
        return None

    def observation(self, key: bytes | None, h: dict[str, bytes], value: bytes) -> ObservationFields | None:
        """An observation's fields (after its trial ID) read in place, or None."""
        if self.observation_schema is None:
            return None
        read = self._tick_actor(self.observation_schema, key, h.get(HEADER_TICK), h.get(HEADER_RECEIVER), value)
        if read is None or h.get(HEADER_SENDER) != _ENVIRONMENT or h.get(HEADER_ID, b"") != b"":
            return None
        tick, actor, payload, tail = read
        if len(tail) < 4 or tail[0] > 1 or tail[1] > 1 or tail[2] > 1:
            return None
        if tail[3:] == b"\x00":  # reward: the union's null
            if HEADER_REWARD in h:
                return None
            reward = None
        elif len(tail) == 12 and tail[3] == 2 and h.get(HEADER_REWARD) == b"1" and tick >= 1:  # its double
            reward = _DOUBLE.unpack_from(tail, 4)[0]
            if reward_bounds_problem(reward, 1.0) is not None:
                return None
        else:
            return None
        return tick, actor, payload, tail[0] == 1, tail[1] == 1, tail[2] == 1, reward

    def action(self, key: bytes | None, h: dict[str, bytes], value: bytes) -> ActionFields | None:
        """An action's fields (after its trial ID) read in place, or None."""
        if self.action_schema is None:
            return None
        read = self._tick_actor(self.action_schema, key, h.get(HEADER_TICK), h.get(HEADER_SENDER), value)
        if read is None or h.get(HEADER_RECEIVER) != b"" or h.get(HEADER_ID, b"") != b"":
            return None
        tick, actor, payload, tail = read
        if tail == b"\x00":  # policy_version: the union's null
            policy_version = None
        elif tail[:1] == b"\x02":  # its long
            read_long = _varint_at(tail, 1)
            if read_long is None or read_long[1] != len(tail) or not _LONG_MIN <= read_long[0] <= _LONG_MAX:
                return None
            policy_version = read_long[0]
        else:
            return None
        return tick, actor, payload, policy_version

    def _tick_actor(
        self, schema: Schema, key: bytes | None, tick_header: bytes | None, actor_header: bytes | None, value: bytes
    ) -> tuple[int, str, bytes, bytes] | None:
        """(tick, actor, payload, the bytes after it) of a body that starts with the schema's
        header, the record key as its trial ID, the tick header's tick and the actor
        header's name, as Avro encodes them, then a well-formed payload; else None."""
        heads = self._heads[schema.header]  # by schema first: no pair made per record
        head = heads.get(key, _UNSEEN)
        if head is _UNSEEN:
            head = self._remember(heads, key, _avro_string(key, schema.header))
        tick = self._ticks.get(tick_header, _UNSEEN)
        if tick is _UNSEEN:
            tick = self._remember(self._ticks, tick_header, _avro_tick(tick_header))
        actor = self._names.get(actor_header, _UNSEEN)
        if actor is _UNSEEN:
            name = _avro_string(actor_header)
            actor = self._remember(self._names, actor_header, None if name is None else (actor_header.decode(), name))
        if head is None or tick is None or actor is None or not value.startswith(head):
            return None
        pos = len(head)
        if not value.startswith(tick[1], pos):
            return None
        pos += len(tick[1])
        if not value.startswith(actor[1], pos):
            return None
        pos += len(actor[1])
        if pos < len(value) and value[pos] < 0x80:  # a payload under 64 bytes: its size in one byte
            size, pos = (value[pos] >> 1) ^ -(value[pos] & 1), pos + 1
        else:
            read = _varint_at(value, pos)
            if read is None:
                return None
            size, pos = read
        end = pos + size
        if size < 0 or end > len(value):
            return None
        return tick[0], actor[0], value[pos:end], value[end:]

    def _remember(self, cache: dict, key: object, found: object) -> object:
        if len(cache) >= self.CACHED:
            cache.clear()
        cache[key] = found
        return found


def _tick_schema(store: SchemaStore, cls: type[Observation] | type[Action], fields: list) -> Schema | None:
    """The schema ``cls`` is written with, if it is the one :class:`TickBodies` reads (its fields,
    in the order of the event's); None otherwise, and every such record takes the general way."""
    try:
        schema = store.get(cls.SCHEMA)
    except CodecError:
        return None
    if (
        not isinstance(schema.parsed, dict)
        or [(f["name"], f["type"]) for f in schema.parsed.get("fields", ())] != fields
    ):
        return None
    if [name for name, _ in fields] != [f.name for f in dataclasses.fields(cls)]:
        return None
    return schema


def _avro_string(raw: bytes | None, prefix: bytes = b"") -> bytes | None:
    """``prefix`` then ``raw`` as an Avro string, if it is UTF-8 (a string of the body the
    codec would decode); None if it is not, or absent."""
    if raw is None:
        return None
    try:
        raw.decode()
    except UnicodeDecodeError:
        return None
    return prefix + varint(len(raw)) + raw


def _avro_tick(header: bytes | None) -> tuple[int, bytes] | None:
    """(tick, as an Avro long) of a tick header written as the body's tick is compared
    (``str(tick)``); None for any other header."""
    try:
        tick = int(header)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if str(tick).encode() != header or not _LONG_MIN <= tick <= _LONG_MAX:
        return None
    return tick, varint(tick)


def _varint_at(data: bytes, pos: int) -> tuple[int, int] | None:
    """(the zigzag varint at ``pos``, the position after it); None where the codec fails on it
    (past the end, longer than 10 bytes)."""
    try:
        return read_varint(data, pos)
    except (IndexError, ValueError):
        return None
