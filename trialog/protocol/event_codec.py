"""Events to record values and back: :class:`EventCodec`, through a
:class:`~trialog.protocol.codec.SchemaStore`, with the fast paths for the flat records
every tick carries (the event types themselves are :mod:`trialog.protocol.events`)."""

from __future__ import annotations

import dataclasses
import operator

from trialog.errors import CodecError
from trialog.protocol.codec import HEADER_SIZE, SchemaStore
from trialog.protocol.events import (
    BY_KIND,
    EVENT_TYPES,
    ActorClassSpec,
    ActorSpec,
    DeadLetter,
    Event,
    Observation,
    ResolvedTrial,
)
from trialog.protocol.rewards import reward_bounds_problem


class _Layout:
    """What an event type needs besides ``cls(**record)``: nested records and tuples
    (precomputed: this runs per record)."""

    def __init__(self, cls: type[Event]):
        self.names = [f.name for f in dataclasses.fields(cls)]
        self.nested = _NESTED if issubclass(cls, ResolvedTrial) else {}
        self.tuples = [
            f.name for f in dataclasses.fields(cls) if str(f.type).startswith("tuple[") and f.name not in self.nested
        ]
        self.mappings = [f.name for f in dataclasses.fields(cls) if str(f.type).startswith("Mapping[")]
        self.plain = not (self.nested or self.tuples or self.mappings)  # the record is the fields as they are


_NESTED: dict[str, type] = {"actors": ActorSpec, "actor_classes": ActorClassSpec}
_LAYOUTS = {cls: _Layout(cls) for cls in EVENT_TYPES}


class EventCodec:
    """Turns events into record values and back, through a :class:`SchemaStore`."""

    def __init__(self, store: SchemaStore | None = None):
        self.store = store or SchemaStore.with_builtin()
        self._schemas = {cls: self.store.get(cls.SCHEMA) for cls in EVENT_TYPES}
        # Events whose schema is a flat record of exactly their fields (every tick's records):
        # encoded straight from their attributes, without building a dict first.
        self._rows = {
            cls: operator.attrgetter(*schema.flat.names)
            for cls, schema in self._schemas.items()
            if schema.flat is not None and _LAYOUTS[cls].plain and set(schema.flat.names) == set(_LAYOUTS[cls].names)
        }
        # ... and decoded straight into them, their fields given in order, when written with
        # the schema this process reads (a record of an older schema version takes the general path).
        self._positional = {
            cls: schema
            for cls, schema in self._schemas.items()
            if cls in self._rows and schema.flat.names == _LAYOUTS[cls].names
        }

    def encode(self, event: Event | DeadLetter) -> bytes:
        if isinstance(event, DeadLetter):
            return self.store.encode(DeadLetter.SCHEMA, event.to_record())
        row = self._rows.get(type(event))
        if row is not None:
            schema = self._schemas[type(event)]
            try:
                return schema.flat.encode_row(row(event), schema.header)
            except Exception as exc:
                raise CodecError(f"value does not match schema {schema.name}: {exc}") from exc
        layout = _LAYOUTS[type(event)]
        record = {name: getattr(event, name) for name in layout.names}
        for name in layout.nested:
            record[name] = [dataclasses.asdict(v) for v in record[name]]
        for name in layout.tuples:
            record[name] = list(record[name])
        for name in layout.mappings:
            record[name] = dict(record[name])
        return self._schemas[type(event)].encode(record)

    def decode(self, value: bytes, kind: str | None = None) -> Event:
        """Decode a record value; ``kind`` (from the headers) picks between event types
        that share a schema (``trial.pending`` / ``trial.started``)."""
        cls = BY_KIND.get(kind) if kind else None
        schema = self._positional.get(cls)
        if schema is not None and type(value) is bytes and value.startswith(schema.header):
            try:
                row = schema.flat.decode_row(value, HEADER_SIZE)
            except Exception as exc:
                raise CodecError(f"bytes do not decode as {schema.name}: {exc}") from exc
            event = cls(*row)
            if cls is Observation and event.reward is not None:
                _check_carried(event)
            return event
        writer, record = self.store.decode_with_writer(value)
        if cls is None or cls.SCHEMA != writer.name:
            cls = next((c for c in EVENT_TYPES if c.SCHEMA == writer.name), None)
            if cls is None:
                raise CodecError(f"schema {writer.name} is not a Trialog event")
        layout = _LAYOUTS[cls]
        for name, nested_cls in layout.nested.items():
            record[name] = tuple(nested_cls(**item) for item in record[name])
        for name in layout.tuples:
            record[name] = tuple(record[name])
        try:
            event = cls(**record)
        except TypeError as exc:
            raise CodecError(f"{writer.name} record does not fit {cls.__name__}: {exc}") from exc
        if cls is Observation and event.reward is not None:
            _check_carried(event)
        return event


def _check_carried(observation: Observation) -> None:
    """An observation whose carried reward could not count is not a record anyone reads: every
    reader refuses it alike (its owner letters it), so none counts the reward another letters."""
    if observation.tick < 1:
        raise CodecError("an observation of tick 0 carries no reward: nothing happened before it")
    problem = reward_bounds_problem(observation.reward, 1.0)
    if problem is not None:
        raise CodecError(f"the reward the observation carries cannot count: {problem}")
