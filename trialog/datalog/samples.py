"""Folding a trial's events into samples: the one place that decides what a sample is.

A :class:`Sample` is one (tick, actor) of a trial: the observation the actor got
at tick t, the action it answered with, the aggregated reward for tick t (I-4)
with every raw source, the messages addressed to it at t and the
terminated/truncated/final flags. The logger, replay and export all build their
samples with :class:`TrialFold`, so they cannot disagree.

The fold takes events in log order (I-3) and never raises on bad input: a
record that does not decode, a missing tick, a trial without ``trial.ended``,
an event for an actor the trial does not have — each becomes a line in
:attr:`TrialFold.problems` and the fold goes on.

The fold keeps what the runtime applied, by the same rules:

- the action of (tick, actor) is the first ``action`` or ``actor.timeout`` logged
  *after* the actor's observation of that tick that the environment applies, by
  the environment's rules (:meth:`trialog.runtime.environment_runtime.EnvironmentHandler._on_action`):
  an action sent early, a second one, one answering a ``final`` observation (the
  actor has left, or the trial is over), one whose payload does not decode in the
  class's action schema, and — for a client seat — one without the ``holder``
  header of the seat's current holder (:class:`trialog.trust.seats.SeatBook`, from the
  ``actor.joined`` records) is not an answer: the environment dead-letters it and
  later applies the timeout policy, which the sample shows. A timeout with the
  ``default_action`` policy stands for the class's default action
  (``timed_out=True`` on the sample). So :meth:`TrialFold.add` takes each record's
  headers with its event;
- a reward or message counts if it passes the owner's rules
  (:func:`trialog.protocol.owners.reward_problem`, ``message_problem``): a reward
  for a tick to come, out of bounds, naming its sender, or for an address that
  reaches nobody but its sender… does not; a reward or message reaches the actors
  :func:`trialog.protocol.trial.reaches` says (never its sender);
- nothing but rewards counts after ``trial.ended``: an observation the
  environment wrote as the orchestrator ended the trial is not part of it.

Rewards join their tick whenever they arrive, after ``trial.ended`` included
(retroactive rewards). One sender gives one reward per (tick, receiver): a later
one from the same sender is a correction and replaces it; a repeat changes
nothing (I-8).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from trialog.errors import CodecError
from trialog.protocol.codec import SchemaStore
from trialog.protocol.events import (
    Action,
    ActorJoined,
    ActorTimeout,
    Event,
    Message,
    Observation,
    ParametersChanged,
    Reward,
    TrialEnded,
    TrialStarted,
    carried_reward,
)
from trialog.protocol.owners import message_problem, reward_problem
from trialog.protocol.rewards import aggregate
from trialog.protocol.trial import ClassSchemas, class_schemas, reaches
from trialog.trust.seats import SeatBook, seat_headers


# Samples and what they carry are values: treat them as read-only. They are not frozen
# dataclasses because a replay or a learner makes one per (tick, actor) it reads, and a
# frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: a
# Sample cost 4.6 µs to make, against 0.4 µs as a plain slots dataclass (as
# :class:`trialog.bus.base.Record`). ``unsafe_hash`` keeps them hashable, as they were.
@dataclass(slots=True, unsafe_hash=True)
class RewardSource:
    """One raw reward joined to a sample (the log keeps them all; I-4 aggregates)."""

    sender: str
    receiver: str
    value: float
    confidence: float
    user_data: str | None = None  # JSON text, as sent


@dataclass(slots=True, unsafe_hash=True)
class MessageIn:
    """A message addressed to the sample's actor at the sample's tick."""

    sender: str
    receivers: tuple[str, ...]
    message_id: str
    payload: str  # JSON text, as sent


@dataclass(slots=True, unsafe_hash=True)
class Sample:
    """One (tick, actor) of a trial.

    ``observation_avro``/``action_avro`` are the payloads exactly as logged (Avro
    single-object encoding in the actor class's schema); ``observation``/``action``
    are the same decoded into Python values (tensors as NumPy arrays). Equality
    compares the bytes, never the decoded values.
    """

    trial_id: str
    tick: int
    actor: str
    actor_class: str
    implementation: str
    observation_avro: bytes
    action_avro: bytes | None
    reward: float
    reward_sources: tuple[RewardSource, ...]
    messages: tuple[MessageIn, ...] = ()
    terminated: bool = False
    truncated: bool = False
    final: bool = False
    timed_out: bool = False
    policy_version: int | None = None  # the model version that chose the action (None: no model)
    observation: Any = field(default=None, compare=False)
    action: Any = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (payloads as decoded values; bytes as base64)."""
        return {
            "trial_id": self.trial_id,
            "tick": self.tick,
            "actor": self.actor,
            "actor_class": self.actor_class,
            "implementation": self.implementation,
            "observation": self.observation,
            "action": self.action,
            "reward": self.reward,
            "reward_sources": [
                {
                    "sender": r.sender,
                    "receiver": r.receiver,
                    "value": r.value,
                    "confidence": r.confidence,
                    "user_data": r.user_data,
                }
                for r in self.reward_sources
            ],
            "messages": [
                {"sender": m.sender, "receivers": list(m.receivers), "message_id": m.message_id, "payload": m.payload}
                for m in self.messages
            ],
            "terminated": self.terminated,
            "truncated": self.truncated,
            "final": self.final,
            "timed_out": self.timed_out,
            "policy_version": self.policy_version,
        }


def to_json_text(value: Any) -> str:
    """A decoded payload as JSON text (NumPy arrays as nested lists, bytes as base64)."""
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY, default=_json_default).decode()


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def with_rewards(sample: Sample, rewards: Iterable[RewardSource]) -> Sample:
    """The sample with more reward sources joined, in log order (a later reward of a
    (sender, receiver) already there replaces it: a correction) and its aggregate
    recomputed (I-4)."""
    by_source = {(r.sender, r.receiver): r for r in sample.reward_sources}
    for r in rewards:
        by_source[(r.sender, r.receiver)] = r
    sources = tuple(by_source.values())
    if sources == sample.reward_sources:
        return sample
    return replace(sample, reward_sources=sources, reward=aggregate(sources))


def apply_rewards(samples: Iterable[Sample], rewards: Iterable[tuple[int, RewardSource]]) -> list[Sample]:
    """Join (tick, reward) pairs — e.g. archive corrections — to the samples they reach."""
    by_tick: dict[int, list[RewardSource]] = {}
    for tick, r in rewards:
        by_tick.setdefault(tick, []).append(r)
    out = []
    for s in samples:
        reaching = [r for r in by_tick.get(s.tick, ()) if reaches(r.receiver, r.sender, s.actor, s.actor_class)]
        out.append(with_rewards(s, reaching) if reaching else s)
    return out


def reward_source(reward: Reward) -> RewardSource:
    return RewardSource(reward.sender, reward.receiver, reward.value, reward.confidence, reward.user_data)


class TrialFold:
    """The samples of one trial, built from its events in log order."""

    def __init__(self, trial_id: str, store: SchemaStore):
        self.trial_id = trial_id
        self.store = store
        self.started: TrialStarted | None = None
        self.ended: TrialEnded | None = None
        self.problems: list[str] = []
        self.schemas: dict[str, ClassSchemas] = {}
        self._classes: dict[str, str] = {}
        self._impls: dict[str, str] = {}
        self._clients: frozenset[str] = frozenset()  # client seats: their actions count only from their holder
        self._seats = SeatBook()  # who holds each seat, from the actor.joined records (as the environment keeps it)
        # (tick, actor) -> (payload, terminated, truncated, final): an observation's fields, not
        # the event, so that a reader may fold one without building it (TrialFold.observe).
        self._observations: dict[tuple[int, str], tuple[bytes, bool, bool, bool]] = {}
        # (tick, actor) -> the applied answer: (payload, policy_version) for an action (the
        # same reason), the event for a timeout.
        self._actions: dict[tuple[int, str], tuple[bytes, int | None] | ActorTimeout] = {}
        self._action_values: dict[tuple[int, str], Any] = {}  # an applied action's payload, decoded once
        # actor -> (tick, decoded observation) of the last sample() asked for: a learner asks for
        # each observation twice, as the one after a step and then as the next step's.
        self._last_observation: dict[str, tuple[int, Any]] = {}
        # tick -> actors observed then (not finally): the barrier. Tuples, not lists: the collector stops
        # tracking a tuple of strings, so a replay's folds do not grow the heap it traverses.
        self._expected_at: dict[int, tuple[str, ...]] = {}
        # By tick, so that one sample's rewards and messages are found without a scan of the trial's.
        self._rewards: dict[int, dict[tuple[str, str], Reward]] = {}  # tick -> (sender, receiver) -> reward
        self._messages: dict[int, dict[tuple, Message]] = {}  # tick -> identity -> message
        self.tick = -1  # the latest observed tick: rewards and messages may address it, not later ones
        self.stepped = (
            -1
        )  # the latest tick whose every active actor has its action or timeout (the environment stepped it)
        self.parameter_changes: list[tuple[int, dict]] = []  # (tick before whose update it applies, parameters)
        self.events = 0  # records of this trial read, duplicates included

    # --- input -------------------------------------------------------------------------
    def add(self, event: Event, headers: Sequence[tuple[str, bytes]] = ()) -> None:
        """Fold one event, read in log order; ``headers``: its record's headers (the seat
        rule reads the ``holder`` of ``actor.joined`` and of a client seat's actions: an
        action folded without them does not count for a seat)."""
        match event:
            case Observation():
                self.observe(
                    event.tick, event.actor, event.payload, event.terminated, event.truncated, event.final, event.reward
                )
                return
            case Action():
                self.act(event.tick, event.actor, event.payload, event.policy_version, headers)
                return
        self.events += 1
        if self.ended is not None and not isinstance(event, Reward | TrialEnded):
            return  # after the end only (retroactive) rewards count
        match event:
            case TrialStarted():
                if self.started is None:
                    self._start(event)
            case TrialEnded():
                if self.ended is None:
                    self.ended = event
                    self._cut_after(event.tick)
            case ActorTimeout():
                key = (event.tick, event.actor)
                if self._known(event.actor, event.KIND, event.tick) and key not in self._actions:
                    observation = self._observations.get(key)
                    if observation is not None and not observation[3]:  # observed, and not finally
                        self._actions[key] = event
                        self._maybe_stepped(event.tick)
            case ActorJoined():
                self._seats.joined(self.trial_id, event.actor, *seat_headers(headers))
            case ParametersChanged():
                self._parameters(event)
            case Reward():
                self._reward(event)
            case Message():
                if message_problem(event, self.tick, self._classes if self.started is not None else None) is None:
                    self._messages.setdefault(event.tick, {}).setdefault(event.identity, event)

    def observe(
        self,
        tick: int,
        actor: str,
        payload: bytes,
        terminated: bool = False,
        truncated: bool = False,
        final: bool = False,
        reward: float | None = None,
    ) -> None:
        """:meth:`add` of an :class:`Observation` of this trial given by its fields: a reader
        that checked the record against its body need not build the event (on a replay,
        building it cost more than folding it). ``reward``: the reward it carries
        (:meth:`Observation.carried_reward`), folded as the record it stands for, before it."""
        self.events += 1
        if self.ended is not None:  # after the end only (retroactive) rewards count: the one it carries too
            if reward is not None and actor in self._classes:
                self._reward(carried_reward(self.trial_id, tick, actor, reward))
            return
        if self._known(actor, Observation.KIND, tick):
            if reward is not None:
                self._reward(carried_reward(self.trial_id, tick, actor, reward))
            key = (tick, actor)
            if key not in self._observations:  # a repeat is the same event (I-8)
                self._observations[key] = (payload, terminated, truncated, final)
                if not final:
                    self._expected_at[tick] = self._expected_at.get(tick, ()) + (actor,)
            if tick > self.tick:
                self.tick = tick

    def _reward(self, reward: Reward) -> None:
        if reward_problem(reward, self.tick, self._classes if self.started is not None else None) is None:
            self._rewards.setdefault(reward.tick, {})[(reward.sender, reward.receiver)] = reward  # a later one corrects

    def act(
        self,
        tick: int,
        actor: str,
        payload: bytes,
        policy_version: int | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        """:meth:`add` of an :class:`Action` of this trial given by its fields (see :meth:`observe`)."""
        self.events += 1
        if self.ended is not None:
            return
        key = (tick, actor)
        if self._known(actor, Action.KIND, tick) and key not in self._actions and self._answers(key, payload, headers):
            self._actions[key] = (payload, policy_version)
            self._maybe_stepped(tick)

    def _answers(self, key: tuple[int, str], payload: bytes, headers: Sequence[tuple[str, bytes]]) -> bool:
        """Does the environment apply this action as the actor's answer at its tick? Its
        observation is logged before it and is not final; an action from a seat carries its
        holder; its payload decodes in the class's schema."""
        observation = self._observations.get(key)
        if observation is None or observation[3]:
            return False
        actor = key[1]
        if actor in self._clients and self._seats.refuses(self.trial_id, actor, seat_headers(headers)[0]) is not None:
            return False
        schemas = self.schemas.get(self._classes[actor])
        if schemas is None:
            return False
        try:
            self._action_values[key] = self.store.decode(payload, schemas.action)
        except CodecError:
            return False
        return True

    def _cut_after(self, last: int) -> None:
        """The end's tick is the trial's last. An orchestrator ending a trial (wall clock,
        inactivity, terminate) names the latest tick it has read; the environment may have
        logged the next one just before that end, unread, and the actions answering it come
        after the end and are refused. That tick is not part of the trial: its observations,
        and what was addressed to it, are no samples."""
        for key in [k for k in self._observations if k[0] > last]:
            del self._observations[key]
            self._actions.pop(key, None)
            self._action_values.pop(key, None)
        for by_tick in (self._expected_at, self._rewards, self._messages):
            for tick in [t for t in by_tick if t > last]:
                del by_tick[tick]
        self.tick = last

    def _maybe_stepped(self, tick: int) -> None:
        """Follow the environment's barrier: tick t is stepped once every actor observed at t
        (and not told it was its last observation) has an action or a timeout for it."""
        if tick != self.stepped + 1:
            return
        actions = self._actions
        for actor in self._expected_at.get(tick, ()):  # a loop, not a list: this runs per action
            if (tick, actor) not in actions:
                return
        self.stepped = tick

    def _parameters(self, change: ParametersChanged) -> None:
        """As the environment runtime applies it: before the update of its tick, or of the
        tick under way when it is read, if that is later; invalid ones not at all."""
        try:
            parameters = orjson.loads(change.parameters)
        except ValueError:
            return
        if isinstance(parameters, dict) and change.tick >= 0:
            self.parameter_changes.append((max(change.tick, self.stepped + 1), parameters))

    def bad_record(self, offset: int, reason: str) -> None:
        """A record of this trial that could not be decoded."""
        self.events += 1
        self.problems.append(f"offset {offset}: {reason}")

    def _start(self, started: TrialStarted) -> None:
        self.started = started
        self._classes = {a.name: a.actor_class for a in started.actors}
        self._impls = {a.name: a.implementation for a in started.actors}
        self._clients = frozenset(a.name for a in started.actors if a.client)
        self.tick = max(
            self.tick, 0
        )  # rewards and messages may address tick 0 from the start, as the orchestrator judges
        try:
            self.schemas = class_schemas(self.store, started)
        except CodecError as exc:
            self.problems.append(f"trial.started carries schemas that do not parse: {exc}")

    def _known(self, actor: str, kind: str, tick: int) -> bool:
        if actor in self._classes:  # never before trial.started: it fills them
            return True
        if self.started is None:
            self.problems.append(f"{kind} at tick {tick} before trial.started (not joined)")
        else:
            self.problems.append(f"{kind} at tick {tick} for {actor!r}, who is not in the trial")
        return False

    # --- output ------------------------------------------------------------------------
    def samples(self) -> list[Sample]:
        """The samples so far, by tick then actor; also checks for gaps (see :attr:`problems`)."""
        if self.started is None:
            return []
        sample, decoded = self._sample, self._decoded
        return [
            sample(tick, actor, obs, decoded(tick, actor, obs[0]))
            for (tick, actor), obs in sorted(self._observations.items())
        ]

    def sample(self, tick: int, actor: str) -> Sample | None:
        """The sample of one (tick, actor) so far, if its observation is logged."""
        obs = self._observations.get((tick, actor))
        if obs is None or self.started is None:
            return None
        return self._sample(tick, actor, obs, self._observation_of(tick, actor, obs))

    def transition(
        self, tick: int, actor: str, senders: Callable[[str], bool] | None = None
    ) -> tuple[Any, Any, float, Any, bool, int | None] | None:
        """What a learner takes in once the actor's observation of ``tick + 1`` is logged: (observation,
        action, reward, next observation, whether that one terminated, policy version) of its step at
        ``tick`` — as ``sample(tick)`` and ``sample(tick + 1)`` have them (the reward of the ``senders``
        given only, as :meth:`reward`) — or None if either observation is not logged or the step has
        no action. Without making the two samples: the learner service asks this at every step, and
        the samples' other fields (the payloads, every reward source, messages) were most of its cost."""
        obs, following = self._observations.get((tick, actor)), self._observations.get((tick + 1, actor))
        if obs is None or following is None or self.started is None:
            return None
        _, action, _, policy_version = self._applied(tick, actor, self.schemas.get(self._classes[actor]))
        if action is None:
            return None
        observation = self._observation_of(tick, actor, obs)
        after = self._observation_of(tick + 1, actor, following)
        return observation, action, self.reward(tick, actor, senders), after, following[1], policy_version

    def _observation_of(self, tick: int, actor: str, obs: tuple[bytes, bool, bool, bool]) -> Any:
        """The decoded payload of the actor's observation at ``tick`` (None if it does not decode), the
        last one asked for kept: a learner asks for each twice, as the one after a step and then as the
        next step's."""
        last = self._last_observation.get(actor)
        if last is not None and last[0] == tick:
            return last[1]
        observation = self._decoded(tick, actor, obs[0])
        if observation is not None:
            self._last_observation[actor] = (tick, observation)
        return observation

    def _decoded(self, tick: int, actor: str, payload: bytes) -> Any:
        """An observation's payload decoded in its class's schema; None (and a problem noted) if it does not decode."""
        schemas = self.schemas.get(self._classes[actor])
        if schemas is None:
            return None
        try:
            return self.store.decode(payload, schemas.observation)
        except CodecError as exc:
            self.problems.append(f"observation of {actor} at tick {tick} does not decode: {exc}")
            return None

    def reward(self, tick: int, actor: str, senders: Callable[[str], bool] | None = None) -> float:
        """The aggregated reward of one (tick, actor) so far (I-4), as its sample has it,
        without decoding the sample's payloads; of the ``senders`` given only (a learner told
        which sources to learn from: :func:`trialog.protocol.rewards.senders_matching`)."""
        sources = self._reward_sources(tick, actor)
        return aggregate(r for r in sources if senders is None or senders(r.sender))

    def _reward_sources(self, tick: int, actor: str) -> tuple[RewardSource, ...]:
        by_source = self._rewards.get(tick)
        if not by_source:
            return ()
        actor_class = self._classes[actor]
        return tuple(reward_source(r) for r in by_source.values() if reaches(r.receiver, r.sender, actor, actor_class))

    def _sample(self, tick: int, actor: str, obs: tuple[bytes, bool, bool, bool], observation: Any) -> Sample:
        """The sample of (tick, actor) from its observation's fields and its payload decoded (:meth:`_decoded`)."""
        payload, terminated, truncated, final = obs
        actor_class = self._classes[actor]
        schemas = self.schemas.get(actor_class)
        action_avro, action, timed_out, policy_version = self._applied(tick, actor, schemas)
        sources = self._reward_sources(tick, actor)
        messages = self._messages.get(tick)
        # Positional: matching seventeen keywords is a measurable part of a sample's making, one per observation.
        return Sample(
            self.trial_id,
            tick,
            actor,
            actor_class,
            self._impls[actor],
            payload,
            action_avro,
            aggregate(sources) if sources else 0.0,
            sources,
            tuple(
                MessageIn(m.sender, m.receivers, m.message_id, m.payload)
                for m in messages.values()
                if any(reaches(r, m.sender, actor, actor_class) for r in m.receivers)
            )
            if messages
            else (),
            terminated,
            truncated,
            final,
            timed_out,
            policy_version,
            observation,
            action,
        )

    def _applied(
        self, tick: int, actor: str, schemas: ClassSchemas | None
    ) -> tuple[bytes | None, Any, bool, int | None]:
        """(action as Avro, action, whether it timed out, policy version) of what the environment applied
        for the actor at ``tick``: its action, a timeout's default action, or nothing (Nones)."""
        chosen = self._actions.get((tick, actor))
        if type(chosen) is tuple:  # an action, decoded when applied (_answers)
            return chosen[0], self._action_values[(tick, actor)], False, chosen[1]
        if chosen is not None:  # a timeout
            return (*self._timed_out(chosen, schemas), None)
        return None, None, False, None

    @staticmethod
    def _timed_out(chosen: ActorTimeout, schemas: ClassSchemas | None) -> tuple[bytes | None, Any, bool]:
        if chosen.policy == "default_action" and schemas is not None and schemas.has_default_action:
            return schemas.action.encode(schemas.default_action), schemas.default_action, True
        return None, None, True

    def check(self) -> list[str]:
        """Problems with the trial as a whole (gaps, no end), on top of :attr:`problems`."""
        found = list(self.problems)
        if self.started is None:
            found.append("no trial.started for this trial")
            return found
        if self.ended is None:
            found.append("the trial has no trial.ended (still running, or its end was lost)")
        by_actor: dict[str, list[int]] = {}
        for tick, actor in sorted(self._observations):
            by_actor.setdefault(actor, []).append(tick)
        for actor, ticks in sorted(by_actor.items()):
            missing = sorted(set(range(ticks[-1] + 1)) - set(ticks))
            if missing:
                found.append(f"{actor}: no observation for tick(s) {_ranges(missing)}")
            for tick in ticks[:-1]:
                if (tick, actor) not in self._actions:
                    found.append(f"{actor}: no action for tick {tick}, yet later ticks exist")
        last = self.ended.tick if self.ended is not None else max((t for t, _ in self._observations), default=0)
        observed_at: dict[int, list[str]] = {}
        for tick, actor in self._observations:
            observed_at.setdefault(tick, []).append(actor)
        for tick, by_source in self._rewards.items():
            for sender, receiver in by_source:
                if tick > last or not any(
                    reaches(receiver, sender, a, self._classes[a]) for a in observed_at.get(tick, ())
                ):
                    found.append(f"reward from {sender} for {receiver} at tick {tick} reaches no sample")
        return found


def _ranges(ticks: list[int]) -> str:
    parts, start, prev = [], ticks[0], ticks[0]
    for t in [*ticks[1:], None]:
        if t is not None and t == prev + 1:
            prev = t
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if t is not None:
            start = prev = t
    return ", ".join(parts)
