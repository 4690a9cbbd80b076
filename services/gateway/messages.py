"""What a browser sees of a trial: log events as small JSON messages (the socket
protocol is written out in docs/humans.md).

Avro stays on Kafka; here payloads are decoded with the trial's actor-class
schemas and turned into plain JSON (NumPy arrays become lists).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np

from trialog.bus.base import Bus, Record
from trialog.errors import CodecError
from trialog.protocol.events import (
    HEADER_KIND,
    Action,
    ActorJoined,
    ActorLeft,
    ActorTimeout,
    Event,
    Message,
    Observation,
    ResolvedTrial,
    Reward,
    TrialEnded,
    View,
)
from trialog.protocol.in_place import TickBodies
from trialog.protocol.owners import check_headers
from trialog.protocol.trial import ClassSchemas, class_schemas, loads


def plain(value: Any) -> Any:
    """A decoded Avro value as JSON: arrays to lists, NaN and infinities to null."""
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, np.generic):
        return plain(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return None  # raw bytes have no JSON form; the log keeps them
    return value


class TrialView:
    """One trial as the gateway reads it: its resolved record and class schemas."""

    def __init__(self, bus: Bus, resolved: ResolvedTrial):
        self.bus = bus
        self.resolved = resolved
        self.schemas: dict[str, ClassSchemas] = class_schemas(bus.store, resolved)
        self.class_of = {a.name: a.actor_class for a in resolved.actors}
        # Once the environment publishes views, pages draw those: observations (which can
        # be large feature vectors) are then left out of the socket; the log keeps them.
        self.has_views = False

    def describe(self) -> dict[str, Any]:
        r = self.resolved
        return {
            "trial": r.trial_id,
            "spec": r.spec,
            "environment": r.environment,
            "actors": [
                {"name": a.name, "class": a.actor_class, "implementation": a.implementation, "client": a.client}
                for a in r.actors
            ],
            "classes": {
                c.name: {
                    "action_schema": s.action_json,
                    "default_action": s.default_action,
                }
                for c, s in ((c, self.schemas[c.name]) for c in r.actor_classes)
            },
            "max_ticks": r.max_ticks,
            "tick_interval_ms": getattr(r, "tick_interval_ms", None),
        }

    def observation(self, event: Observation) -> Any:
        return plain(self.bus.store.decode(event.payload, self.schemas[self.class_of[event.actor]].observation))

    def action(self, event: Action) -> Any:
        return plain(self.bus.store.decode(event.payload, self.schemas[self.class_of[event.actor]].action))

    def encode_action(self, actor: str, value: Any) -> bytes:
        """A browser's JSON action in the class's Avro; :class:`CodecError` when it does not fit."""
        return self.schemas[self.class_of[actor]].action.encode(value)

    def message(self, event: Event) -> dict[str, Any] | None:
        """The browser's form of an event (None: not shown to browsers)."""
        match event:
            case Observation():
                return {"type": "observation", "tick": event.tick, "actor": event.actor, "final": event.final,
                        "observation": None if self.has_views else self.observation(event)}  # fmt: skip
            case View():
                self.has_views = True
                return {"type": "view", "tick": event.tick, "view": loads(event.view)}
            case Action():
                try:
                    action = self.action(event)
                except (CodecError, KeyError):
                    return None  # the environment dead-letters it
                return {"type": "action", "tick": event.tick, "actor": event.actor, "action": action}
            case Reward():
                return {"type": "reward", "tick": event.tick, "receiver": event.receiver, "value": plain(event.value),
                        "confidence": plain(event.confidence), "sender": event.sender}  # fmt: skip
            case Message():
                return {
                    "type": "message",
                    "tick": event.tick,
                    "sender": event.sender,
                    "receivers": list(event.receivers),
                    "payload": loads(event.payload),
                }
            case ActorTimeout():
                return {"type": "timeout", "tick": event.tick, "actor": event.actor, "policy": event.policy}
            case ActorJoined():
                return {"type": "joined", "actor": event.actor}
            case ActorLeft():
                return {"type": "left", "tick": event.tick, "actor": event.actor, "reason": event.reason}
            case TrialEnded():
                return {"type": "end", "tick": event.tick, "reason": event.reason, "details": event.details}
        return None


class Decoded:
    """Records as events, checked and decoded once per gateway process: every socket of a
    trial reads the same records (live from the shared tail, or in a catch-up), and the
    tag check and Avro decode are the costly part of a record (bounded, newest kept)."""

    KEPT = 8192

    def __init__(self, bus: Bus):
        self.bus = bus
        self._bodies = TickBodies(bus.store)
        # Oldest first, dropped in O(1): deleting a plain dict's first key scans the deleted
        # slots before it, ~10 µs a record once the cache is full (measured).
        self._events: OrderedDict[tuple[int, int], Event | None] = OrderedDict()

    def __call__(self, record: Record) -> Event | None:
        """A record as an event, or None when it does not decode, says in its headers otherwise
        than its body (e.g. whether an observation carries a reward) or was not written by a key
        allowed to write it (its owner dead-letters it)."""
        key = (record.partition, record.offset)
        try:
            return self._events[key]
        except KeyError:
            pass
        event = self._decode(record)
        if len(self._events) >= self.KEPT:
            self._events.popitem(last=False)
        self._events[key] = event
        return event

    def _decode(self, record: Record) -> Event | None:
        bus = self.bus
        h = dict(record.headers)  # as the tag check and check_headers read them: the last of a name counts
        if bus.refusal(record, h) is not None:
            return None
        kind = record.header(HEADER_KIND)
        event = self._bodies.event(record.key, h, record.value, kind)  # a tick's record, read in place
        if event is not None:
            return event
        try:
            event = bus.codec.decode(record.value, kind)
            check_headers(record.key, record.headers, event)
        except CodecError:
            return None
        if isinstance(event, ResolvedTrial):
            bus.trust.learn(event)  # the seats' keys: what the gateway writes for them is tagged with those
        return event
