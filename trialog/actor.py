"""What a user implements to be a Trialog actor (an agent, a scripted bot, a human client).

Three forms, pick the simpler that fits:

1. **decide** — a class whose ``decide(observation)`` returns the action. Optional
   hooks receive rewards (retroactive ones included, live), messages and the end; an
   :class:`Agent` sends rewards and messages with :meth:`Agent.reward` and
   :meth:`Agent.message`, from ``decide`` or a hook::

       class Greedy(Agent):
           def decide(self, observation):
               if observation["opponent_scored"]:
                   self.reward("opponent", 1.0)  # for this tick
               return int(np.argmax(observation["values"]))

2. **session** — one coroutine over the typed stream of the actor's events::

       async def run(session: ActorSession) -> None:
           async for event in session:
               match event:
                   case ObservationEvent(observation=obs, final=False):
                       session.act(policy(obs))
                   case RewardEvent(tick=t, value=v):
                       remember(t, v)
                   case EndEvent():
                       break

3. **policy** — one object per implementation (per service process) that decides for
   every pending observation of every trial in one call — one forward pass of a
   network for 64 trials, not 64 — and may follow a model published on ``models``::

       class Greedy(Policy):
           def decide_batch(self, requests):
               q = self.network(np.stack([r.observation for r in requests]))
               return list(q.argmax(axis=1))

``decide`` runs on the service's event loop, inline: a fast agent pays no thread hop.
While its calls are slow and mostly wait (sleeps, I/O, native code;
:mod:`trialog.runtime.pace`), they move to a worker thread of their implementation, so
that a slow implementation delays only its own trials; they come back once fast.
``decide_batch`` always runs in that worker thread, in order with the policy's model
loads. The observations read from the log before the loop's next turn (a poll's worth,
or a few) become one call (one ``decide_batch``, or one pass over the agents'
``decide``), in tick order per trial.

Observations arrive decoded into the actor class's types (NumPy arrays where the
schema says ``trialog.Tensor``); actions are encoded by the runtime, which raises
:class:`~trialog.errors.CodecError` when one does not match the action schema.

An actor that cannot play — an agent whose constructor raises, a session that raises —
ends its trial at once (``trial.ended``: ``error``, the exception in its details;
:mod:`trialog.protocol.cannot_play`), rather than leaving the environment to time it out
tick after tick. A ``decide`` that
raises only loses that tick's action: the timeout policy applies.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from trialog.environment import ActorInfo, TrialInfo
from trialog.errors import TrialogError

if TYPE_CHECKING:
    from trialog.model_registry import ModelVersion


@dataclass(frozen=True, slots=True)
class ObservationEvent:
    """The observation of ``tick``. ``final`` means the actor's part is over: no action."""

    tick: int
    observation: Any
    terminated: bool = False
    truncated: bool = False
    final: bool = False


@dataclass(frozen=True, slots=True)
class RewardEvent:
    """One reward from one sender, for ``tick`` (earlier than the current tick when
    retroactive). Aggregation (I-4) is :func:`trialog.protocol.rewards.aggregate`."""

    tick: int
    value: float
    confidence: float
    sender: str
    user_data: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class MessageEvent:
    tick: int
    sender: str
    payload: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class EndEvent:
    """The trial is over; ``reason`` is the one logged in ``trial.ended``."""

    tick: int
    reason: str


ActorEvent = ObservationEvent | RewardEvent | MessageEvent | EndEvent


class Outputs(Protocol):
    """What an actor sends besides its actions: rewards and messages, for the tick being
    answered unless it says otherwise."""

    def reward(
        self,
        receiver: str,
        value: float,
        *,
        tick: int | None = None,
        confidence: float = 1.0,
        user_data: Mapping[str, Any] | None = None,
    ) -> None:
        """Reward other actors (``name``, ``*`` or ``class.*``: a wildcard leaves this actor
        out) for ``tick`` (default: current). Raises :class:`trialog.errors.TrialError` for a
        reward that could not count (docs/protocol.md, "What counts"): value or confidence
        out of bounds (:data:`trialog.protocol.rewards.MAX_REWARD_VALUE`, ``MAX_CONFIDENCE``), naming
        this actor, or reaching no other actor of the trial."""

    def message(self, receivers: Sequence[str], payload: Mapping[str, Any]) -> None:
        """Send a message to actors (or ``env``); raises :class:`trialog.errors.TrialError`
        if a receiver addresses nobody in the trial."""


class ActorSession(Outputs, Protocol):
    """What a session-style actor gets: its trial, itself, its events and its outputs."""

    trial: TrialInfo
    actor: ActorInfo

    def __aiter__(self) -> AsyncIterator[ActorEvent]: ...

    def act(self, action: Any) -> None:
        """Answer the latest observation."""


class Agent:
    """Base class of decide-style actors. One instance per (trial, actor).

    The runtime calls ``decide`` once per observation, in tick order, and the hooks
    as events arrive. ``decide`` MUST be deterministic given the trial seed and the
    observations so far, for recovery to reproduce the same trajectory — and so must
    the rewards and messages it sends.

    A constructor that raises ends the trial at once, with the error as the reason.
    """

    outbox: Outputs | None = None  # set by the actor runtime once the agent is built

    def __init__(self, trial: TrialInfo, actor: ActorInfo) -> None:
        self.trial = trial
        self.actor = actor

    def decide(self, observation: Any) -> Any:
        raise NotImplementedError

    def reward(
        self,
        receiver: str,
        value: float,
        *,
        tick: int | None = None,
        confidence: float = 1.0,
        user_data: Mapping[str, Any] | None = None,
    ) -> None:
        """Reward other actors, as :meth:`Outputs.reward` (checked now, raising
        :class:`trialog.errors.TrialError` for a reward that could not count). ``tick``
        defaults to the tick being decided (in a hook: the latest decided). Written once
        ``decide`` (or the hook) returns, before the action."""
        self._outputs().reward(receiver, value, tick=tick, confidence=confidence, user_data=user_data)

    def message(self, receivers: Sequence[str], payload: Mapping[str, Any]) -> None:
        """Send a message to actors of the trial or ``env``, as :meth:`Outputs.message`;
        written like :meth:`reward`."""
        self._outputs().message(receivers, payload)

    def _outputs(self) -> Outputs:
        if self.outbox is None:
            raise TrialogError(
                f"{type(self).__name__} sends rewards and messages once an actor runtime plays it "
                "(from decide or a hook, not from its constructor)"
            )
        return self.outbox

    def on_reward(self, reward: RewardEvent) -> None:
        """A reward arrived (live, including retroactive rewards for past ticks)."""

    def on_message(self, message: MessageEvent) -> None:
        """A message addressed to this actor arrived."""

    def on_end(self, end: EndEvent) -> None:
        """The trial is over."""


@dataclass(frozen=True, slots=True)
class DecideRequest:
    """One observation waiting for an action, as handed to :meth:`Policy.decide_batch`."""

    trial: TrialInfo
    actor: ActorInfo
    tick: int
    observation: Any


class Policy:
    """Base class of batched implementations: one instance per implementation and
    process, built with the implementation's ``config`` from the spec.

    ``decide_batch`` gets every observation pending for this implementation (across
    all its trials) and returns one action per request, in order. It runs in the
    implementation's worker thread, as does :meth:`load`, so the two never overlap.
    Like ``decide``, it MUST be deterministic given the trial seed, the observations
    and the model version (recovery replays it).

    A policy that names a model (``model`` in its config) follows it: the actor
    service reads ``models`` and calls :meth:`load` with each newer version, without
    a restart; every action then records :attr:`policy_version`.
    """

    policy_version: int | None = None  # the loaded model version, recorded on every action

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = dict(config)

    @property
    def model(self) -> str | None:
        """The name of the model this policy follows on ``models`` (None: none)."""
        return self.config.get("model")

    def decide_batch(self, requests: Sequence[DecideRequest]) -> Sequence[Any]:
        raise NotImplementedError

    def load(self, version: ModelVersion) -> None:
        """A newer version of :attr:`model` was published: take its weights."""

    def trial_ended(self, trial_id: str) -> None:
        """A trial is over: drop whatever was kept for it."""

    @classmethod
    def learner(cls, config: Mapping[str, Any]) -> Any:
        """What the learner service trains for this policy (see :mod:`trialog.learn`)."""
        raise TrialogError(f"{cls.__name__} does not learn: no learner for it")
