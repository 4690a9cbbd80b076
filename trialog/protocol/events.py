"""The records Trialog writes: small frozen types, one per event kind.

Each type mirrors one Avro schema of ``schemas/`` field for field, so that
``to_record`` / ``from_record`` are mechanical. On the wire a record is

- key: the trial ID (UTF-8) — I-1;
- value: the single-object Avro encoding of the event (see :mod:`trialog.protocol.codec`);
- headers: what a consumer needs to skip a record without decoding it —
  ``kind``, ``tick``, ``sender``, ``receiver`` (comma-separated when several),
  ``schema`` (the value's Avro full name) and, on an observation carrying a reward,
  ``reward`` (``1``).

Every event has an :attr:`~Event.identity` — (kind, tick, sender, receiver,
discriminator) — and two records with the same trial and identity are the same
event: consumers ignore the second one (I-8).

Observation and action payloads stay encoded here (bytes in the actor class's
schema); the runtimes decode them into the user's values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from trialog.protocol.roles import ORCHESTRATOR

ENVIRONMENT_SENDER = "env"  # the sender name of the environment's records (its role is roles.ENVIRONMENT)

HEADER_KIND = "kind"
HEADER_TICK = "tick"
HEADER_SENDER = "sender"
HEADER_RECEIVER = "receiver"
HEADER_SCHEMA = "schema"
HEADER_ID = "id"  # the discriminator, present only when an event has one (messages)
HEADER_REWARD = "reward"  # b"1" on an observation that carries a reward (Observation.reward); absent otherwise

TRIAL_ID_MAX = 200  # characters; a trial ID is every record's key (I-1) and appears in file names


def trial_id_problem(trial_id: str) -> str | None:
    """Why a trial ID cannot name a trial (None when it can): empty, too long, or
    holding control characters (it keys every record and names archive files)."""
    if not trial_id:
        return "the trial ID is empty"
    if len(trial_id) > TRIAL_ID_MAX:
        return f"the trial ID has {len(trial_id)} characters; at most {TRIAL_ID_MAX}"
    if not trial_id.isprintable():
        return "the trial ID holds control characters"
    return None


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every record. Subclasses set ``KIND`` and ``SCHEMA``, and say which of
    their fields name the sender and the receiver (or a fixed sender)."""

    KIND: ClassVar[str] = ""
    SCHEMA: ClassVar[str] = ""
    SENDER: ClassVar[str] = ORCHESTRATOR  # fixed sender, when no field names it
    SENDER_FIELD: ClassVar[str | None] = None
    RECEIVER_FIELD: ClassVar[str | None] = None
    trial_id: str

    def event_tick(self) -> int:
        return getattr(self, "tick", -1)

    def event_sender(self) -> str:
        return getattr(self, self.SENDER_FIELD) if self.SENDER_FIELD else self.SENDER

    def event_receiver(self) -> str:
        if not self.RECEIVER_FIELD:
            return ""
        value = getattr(self, self.RECEIVER_FIELD)
        return ",".join(value) if isinstance(value, tuple) else value

    @property
    def identity(self) -> tuple[str, int, str, str, str]:
        """(kind, tick, sender, receiver, discriminator): equal identities, same event (I-8)."""
        return (
            self.KIND,
            self.event_tick(),
            self.event_sender(),
            self.event_receiver(),
            getattr(self, "message_id", ""),
        )

    def headers(self) -> list[tuple[str, bytes]]:
        headers = [
            (HEADER_KIND, self.KIND.encode()),
            (HEADER_TICK, str(self.event_tick()).encode()),
            (HEADER_SENDER, self.event_sender().encode()),
            (HEADER_RECEIVER, self.event_receiver().encode()),
            (HEADER_SCHEMA, self.SCHEMA.encode()),
        ]
        discriminator = getattr(self, "message_id", "")
        if discriminator:
            headers.append((HEADER_ID, discriminator.encode()))
        if getattr(self, "reward", None) is not None:
            headers.append((HEADER_REWARD, b"1"))
        return headers


# --- control -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartRequest(Event):
    KIND: ClassVar[str] = "trial.start"
    SCHEMA: ClassVar[str] = "trialog.StartRequest"
    SENDER_FIELD: ClassVar[str | None] = "requested_by"
    spec: str
    requested_by: str = ""
    seed: int | None = None
    environment: str | None = None
    environment_config: str | None = None
    implementations: Mapping[str, str] = field(default_factory=dict)
    actors: str | None = None
    max_ticks: int | None = None
    parameters: str = "{}"
    experiment: str = ""
    phase: str = ""


@dataclass(frozen=True, slots=True)
class TerminateRequest(Event):
    KIND: ClassVar[str] = "trial.terminate"
    SCHEMA: ClassVar[str] = "trialog.TerminateRequest"
    SENDER_FIELD: ClassVar[str | None] = "requested_by"
    hard: bool = False
    reason: str = ""
    requested_by: str = ""


# --- trial lifecycle ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ActorSpec:
    """One actor of a resolved trial, as ``trial.started`` carries it (``trialog.ActorSpec``):
    ``config`` is JSON text, the implementation's config with the actor's on top. Made from the
    spec's :class:`~trialog.spec.ActorDefault` by its ``wire``; user code gets it as
    :class:`~trialog.environment.ActorInfo` (:func:`trialog.protocol.trial.actor_info`)."""

    name: str
    actor_class: str
    implementation: str
    config: str = "{}"
    client: bool = False


@dataclass(frozen=True, slots=True)
class ActorClassSpec:
    """An actor class of a resolved trial, as ``trial.started`` carries it
    (``trialog.ActorClassSpec``): its two Avro schemas as JSON text and its default action as
    JSON text (None: it has none). Made from the spec's :class:`~trialog.spec.ActorClass` (the
    default action a value there) by its ``wire``; the runtimes read it back, schemas registered
    and parsed and the default action decoded, as :class:`~trialog.protocol.trial.ClassSchemas`
    (:func:`trialog.protocol.trial.class_schemas`)."""

    name: str
    observation_schema: str
    action_schema: str
    default_action: str | None = None


# The phases of an experiment (a training preset) whose trials a learner learns from; "evaluate" trials it does not.
LEARN_PHASES = frozenset({"heatup", "train"})


@dataclass(frozen=True, slots=True)
class ResolvedTrial(Event):
    """The fully resolved trial, as ``trial.pending`` (waiting for client actors to
    join) or ``trial.started``; both carry the same record."""

    SCHEMA: ClassVar[str] = "trialog.TrialStarted"
    spec: str
    environment: str
    environment_entry: str
    environment_config: str
    actors: tuple[ActorSpec, ...]
    actor_classes: tuple[ActorClassSpec, ...]
    seed: int
    max_ticks: int | None = None
    response_timeout_ms: int = 10_000
    timeout_policy: str = "default_action"
    inactivity_timeout_ms: int | None = None
    wall_clock_limit_ms: int | None = None
    join_timeout_ms: int = 60_000
    parameters: str = "{}"
    experiment: str = ""  # the experiment (training preset) and its phase, "" outside experiments
    phase: str = ""
    tick_interval_ms: int | None = None  # real time: one step per interval (schema v3)

    def as_kind(self, cls: type[ResolvedTrial]) -> ResolvedTrial:
        """The same resolved trial as another kind (pending → started)."""
        return cls(**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)})

    def actor(self, name: str) -> ActorSpec:
        for a in self.actors:
            if a.name == name:
                return a
        raise KeyError(name)

    def actor_class(self, name: str) -> ActorClassSpec:
        for c in self.actor_classes:
            if c.name == name:
                return c
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class TrialStarted(ResolvedTrial):
    KIND: ClassVar[str] = "trial.started"


@dataclass(frozen=True, slots=True)
class TrialPending(ResolvedTrial):
    KIND: ClassVar[str] = "trial.pending"


@dataclass(frozen=True, slots=True)
class TrialRejected(Event):
    KIND: ClassVar[str] = "trial.rejected"
    SCHEMA: ClassVar[str] = "trialog.TrialRejected"
    reason: str
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class TrialTerminating(Event):
    KIND: ClassVar[str] = "trial.terminating"
    SCHEMA: ClassVar[str] = "trialog.TrialTerminating"
    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class EnvironmentDone(Event):
    KIND: ClassVar[str] = "environment.done"
    SCHEMA: ClassVar[str] = "trialog.EnvironmentDone"
    SENDER: ClassVar[str] = ENVIRONMENT_SENDER
    tick: int = 0
    reason: str = "environment"
    details: str = ""


@dataclass(frozen=True, slots=True)
class TrialEnded(Event):
    KIND: ClassVar[str] = "trial.ended"
    SCHEMA: ClassVar[str] = "trialog.TrialEnded"
    tick: int = 0
    reason: str = "environment"
    details: str = ""


# --- the tick ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Observation(Event):
    KIND: ClassVar[str] = "observation"
    SCHEMA: ClassVar[str] = "trialog.Observation"
    SENDER: ClassVar[str] = ENVIRONMENT_SENDER
    RECEIVER_FIELD: ClassVar[str | None] = "actor"
    tick: int = 0
    actor: str = ""
    payload: bytes = b""
    terminated: bool = False
    truncated: bool = False
    final: bool = False
    reward: float | None = None

    def carried_reward(self) -> Reward | None:
        """The environment's reward this observation carries (:attr:`reward`): the same event as
        a reward record from ``env`` to its actor for the tick before, confidence 1, logged just
        before it. An environment runtime writes a reward this way rather than as a record of
        its own when nothing else needs saying (no source, confidence 1, no user data, for an
        actor observed at the next tick): one record a step fewer, for every reader."""
        return None if self.reward is None else carried_reward(self.trial_id, self.tick, self.actor, self.reward)


@dataclass(frozen=True, slots=True)
class Action(Event):
    """``policy_version``: the version of the model in ``models`` that chose the action
    (None when no learned model did)."""

    KIND: ClassVar[str] = "action"
    SCHEMA: ClassVar[str] = "trialog.Action"
    SENDER_FIELD: ClassVar[str | None] = "actor"
    tick: int = 0
    actor: str = ""
    payload: bytes = b""
    policy_version: int | None = None


@dataclass(frozen=True, slots=True)
class Reward(Event):
    """A reward for ``receiver`` (actor name, ``*`` or ``class.*``) at ``tick``.

    One sender gives at most one reward per (receiver, tick): sending it again is
    the same event (I-8). A sender with several judgements per tick uses several
    sender names (``judge/speed``, ``judge/style``)."""

    KIND: ClassVar[str] = "reward"
    SCHEMA: ClassVar[str] = "trialog.Reward"
    SENDER_FIELD: ClassVar[str | None] = "sender"
    RECEIVER_FIELD: ClassVar[str | None] = "receiver"
    tick: int = 0
    receiver: str = "*"
    value: float = 0.0
    confidence: float = 1.0
    sender: str = ENVIRONMENT_SENDER
    user_data: str | None = None


def carried_reward(trial_id: str, tick: int, actor: str, value: float) -> Reward:
    """The reward an observation of ``actor`` at ``tick`` carries (:meth:`Observation.carried_reward`)."""
    return Reward(trial_id, tick=tick - 1, receiver=actor, value=value)


def as_logged(event: Event) -> tuple[Event, ...]:
    """The events a record stands for, in log order: an observation that carries the environment's
    reward (:meth:`Observation.carried_reward`) is that reward's record, then itself."""
    if type(event) is Observation and event.reward is not None:
        return (event.carried_reward(), event)
    return (event,)


def with_carried_rewards(events: Iterable[Event]) -> Iterator[Event]:
    """The events of a log in order, each reward an observation carries just before it, as the
    record it stands for (:func:`as_logged`): what a reader that wants every reward sees."""
    for event in events:
        yield from as_logged(event)


@dataclass(frozen=True, slots=True)
class Message(Event):
    KIND: ClassVar[str] = "message"
    SCHEMA: ClassVar[str] = "trialog.Message"
    SENDER_FIELD: ClassVar[str | None] = "sender"
    RECEIVER_FIELD: ClassVar[str | None] = "receivers"
    tick: int = 0
    sender: str = ""
    receivers: tuple[str, ...] = ()
    message_id: str = ""
    payload: str = "{}"


@dataclass(frozen=True, slots=True)
class View(Event):
    """A compact view of the environment's state with the observations of ``tick``,
    for pages that draw the trial (JSON; ``kind`` names the drawing)."""

    KIND: ClassVar[str] = "view"
    SCHEMA: ClassVar[str] = "trialog.View"
    SENDER: ClassVar[str] = ENVIRONMENT_SENDER
    tick: int = 0
    view: str = "{}"


@dataclass(frozen=True, slots=True)
class ActorJoined(Event):
    KIND: ClassVar[str] = "actor.joined"
    SCHEMA: ClassVar[str] = "trialog.ActorJoined"
    SENDER_FIELD: ClassVar[str | None] = "actor"
    actor: str = ""
    implementation: str = ""


@dataclass(frozen=True, slots=True)
class ActorLeft(Event):
    KIND: ClassVar[str] = "actor.left"
    SCHEMA: ClassVar[str] = "trialog.ActorLeft"
    SENDER: ClassVar[str] = ENVIRONMENT_SENDER
    RECEIVER_FIELD: ClassVar[str | None] = "actor"
    tick: int = 0
    actor: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ActorTimeout(Event):
    KIND: ClassVar[str] = "actor.timeout"
    SCHEMA: ClassVar[str] = "trialog.ActorTimeout"
    SENDER: ClassVar[str] = ENVIRONMENT_SENDER
    RECEIVER_FIELD: ClassVar[str | None] = "actor"
    tick: int = 0
    actor: str = ""
    policy: str = "default_action"


@dataclass(frozen=True, slots=True)
class ParametersChanged(Event):
    KIND: ClassVar[str] = "parameters.changed"
    SCHEMA: ClassVar[str] = "trialog.ParametersChanged"
    SENDER_FIELD: ClassVar[str | None] = "sender"
    tick: int = 0
    sender: str = ""
    parameters: str = "{}"


# --- other topics ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrialRecord(Event):
    """The value of the compacted ``trials`` index: the latest state of a trial."""

    KIND: ClassVar[str] = "trial.record"
    SCHEMA: ClassVar[str] = "trialog.TrialRecord"
    status: str = "pending"
    spec: str = ""
    partition: int = -1
    start_offset: int | None = None
    end_offset: int | None = None
    ticks: int = 0
    reason: str = ""
    implementations: Mapping[str, str] = field(default_factory=dict)
    created_ms: int = 0
    updated_ms: int = 0
    experiment: str = ""
    phase: str = ""
    returns: Mapping[str, float] = field(default_factory=dict)  # once ended: per actor (schema v3)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record a service could not use. Keyed like the original record."""

    KIND: ClassVar[str] = "dead-letter"
    SCHEMA: ClassVar[str] = "trialog.DeadLetter"
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Mapping[str, bytes]
    reason: str
    service: str
    timestamp_ms: int = 0

    def to_record(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def headers_list(self) -> list[tuple[str, bytes]]:
        return [(HEADER_KIND, self.KIND.encode()), (HEADER_SCHEMA, self.SCHEMA.encode())]


EVENT_TYPES: tuple[type[Event], ...] = (
    StartRequest, TerminateRequest, TrialStarted, TrialPending, TrialRejected, TrialTerminating,
    EnvironmentDone, TrialEnded, Observation, Action, Reward, Message, View, ActorJoined, ActorLeft,
    ActorTimeout, ParametersChanged, TrialRecord,
)  # fmt: skip
BY_KIND: dict[str, type[Event]] = {t.KIND: t for t in EVENT_TYPES}


def identity_from_headers(headers: Sequence[tuple[str, bytes]]) -> tuple[str, int, str, str, str]:
    """The event identity read from headers alone (no decoding), as :attr:`Event.identity`."""
    h = decode_headers(headers)
    try:
        tick = int(h.get(HEADER_TICK, "-1"))
    except ValueError:
        tick = -1
    return (h.get(HEADER_KIND, ""), tick, h.get(HEADER_SENDER, ""), h.get(HEADER_RECEIVER, ""), h.get(HEADER_ID, ""))


def decode_headers(headers: Sequence[tuple[str, bytes]] | None) -> dict[str, str]:
    """Record headers as a plain dict of strings (unknown headers kept)."""
    out: dict[str, str] = {}
    for k, v in headers or ():
        try:
            out[k] = v.decode() if v is not None else ""
        except UnicodeDecodeError:
            out[k] = ""
    return out
