"""What a user implements to be a Trialog environment.

An environment implementation owns the state of the world for one trial. The
environment runtime (``trialog.runtime.environment_runtime``) creates one instance per
trial, calls :meth:`Environment.start` once, then :meth:`Environment.update` once
per tick with the actions of every active actor, and :meth:`Environment.end`
when the trial is over. The runtime does everything else: the tick barrier,
response timeouts, writing observations and rewards to the log, recovery.

**Batched stepping** (optional; the environment-side twin of
:meth:`trialog.actor.Policy.decide_batch`). An implementation whose class overrides the
classmethod :meth:`Environment.update_batch` is stepped many trials at a time: when the
records of one poll complete the actions of several of its trials, the runtime makes one
``update_batch(envs, actions)`` call for them (one vmapped step of a JAX simulator, say,
not one step per trial). Everything else stays per trial: timeouts, parameter changes
(applied before the call), views, rewards and observations written in each trial's order.
During recovery a trial is replayed alone through ``update``, so ``update_batch`` MUST give
each trial exactly what ``update`` gives it alone (each trial's randomness from its own
seed, never from its neighbours in a batch). If it raises, it MUST have changed no
trial: the runtime then steps each trial alone with ``update``, so that only the trial
whose step fails ends (with reason ``error``).

The contract (checked by ``trialog.tools.check.check_environment``):

- ``start`` MUST return an observation for every actor of the trial.
- ``update`` MUST return an observation for every actor still in the trial.
- For the same seed, config and actions, ``start`` and ``update`` MUST return the
  same observations and rewards: recovery and ``replay --verify`` rely on it.
- ``update_batch``, if overridden, MUST return per trial what ``update`` would have.
- Payloads MUST match the actor class's Avro schema; NumPy arrays are welcome
  wherever the schema says ``trialog.Tensor``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ActorInfo:
    """One actor of a trial, as resolved by the orchestrator: what environments and agents are
    handed. The log carries it as :class:`trialog.protocol.events.ActorSpec` (the same fields,
    ``config`` as JSON text; :func:`trialog.protocol.trial.actor_info` reads it into this); the
    spec names it as :class:`trialog.spec.ActorDefault` (the actor's own config only).
    """

    name: str
    actor_class: str
    implementation: str
    config: Mapping[str, Any] = field(default_factory=dict)
    client: bool = False


@dataclass(frozen=True)
class TrialInfo:
    """What an environment (or actor) knows about its trial when it starts."""

    trial_id: str
    seed: int
    config: Mapping[str, Any]
    actors: tuple[ActorInfo, ...]
    parameters: Mapping[str, Any] = field(default_factory=dict)
    max_ticks: int | None = None
    experiment: str = ""  # the training experiment and its phase (heatup, train, evaluate); "" outside one
    phase: str = ""

    @property
    def actor_names(self) -> list[str]:
        return [a.name for a in self.actors]


@dataclass(frozen=True)
class RewardOut:
    """A reward the environment gives for the tick it just computed.

    ``receiver`` is an actor name, ``*`` (everyone) or ``class.*``. ``source`` names
    where it comes from inside the environment (e.g. one reward component); the
    log keeps every source apart so the breakdown is never lost.
    """

    receiver: str
    value: float
    confidence: float = 1.0
    source: str | None = None
    user_data: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class MessageOut:
    """A message from the environment to actors (names, ``*`` or ``class.*``)."""

    receivers: Sequence[str]
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class Step:
    """What one ``update`` produced.

    ``rewards`` may be a mapping actor name → value (one source, confidence 1) or
    a sequence of :class:`RewardOut`. ``terminated`` and ``truncated`` stay
    distinct, per actor, as in PettingZoo. ``done`` ends the trial after this tick;
    it is implied when every actor is terminated or truncated.
    """

    observations: Mapping[str, Any]
    rewards: Mapping[str, float] | Sequence[RewardOut] = field(default_factory=dict)
    terminated: Mapping[str, bool] = field(default_factory=dict)
    truncated: Mapping[str, bool] = field(default_factory=dict)
    done: bool = False
    messages: Sequence[MessageOut] = ()


class Environment:
    """Base class for environment implementations (subclassing is optional: any
    object with these methods will do).

    The constructor receives the trial's :class:`TrialInfo`; keep all randomness
    behind ``trial.seed``.

    ``CODE_KEYS`` lists the config keys that name code to import (an adapter's
    ``env``, say): the environment service takes those from the spec it was started
    with, never from the trial's record or a start request (I-9).
    """

    CODE_KEYS: tuple[str, ...] = ()

    def __init__(self, trial: TrialInfo) -> None:
        self.trial = trial

    def start(self) -> Mapping[str, Any]:
        """Return the tick-0 observation of every actor."""
        raise NotImplementedError

    def update(self, actions: Mapping[str, Any]) -> Step:
        """Apply one action per active actor; return the next observations and rewards."""
        raise NotImplementedError

    @classmethod
    def update_batch(cls, envs: Sequence[Environment], actions: Sequence[Mapping[str, Any]]) -> Sequence[Step]:
        """Optional: step several trials of this implementation at once.

        ``envs[i]`` is one trial's instance and ``actions[i]`` its actions, as ``update``
        takes them; return one :class:`Step` per trial, in order, each exactly what
        ``envs[i].update(actions[i])`` would have returned. Raise only without having
        changed any trial (the runtime then steps each alone). Only overriding it makes
        the runtime batch (:func:`steps_in_batches`); this default steps one by one.
        """
        return [env.update(a) for env, a in zip(envs, actions, strict=True)]

    def end(self) -> None:
        """Release resources; called once when the trial is over, whatever the reason."""

    def on_message(self, sender: str, payload: Mapping[str, Any]) -> None:
        """A message addressed to the environment arrived (optional)."""

    def set_parameters(self, parameters: Mapping[str, Any]) -> None:
        """Trial parameters changed during the trial through a logged event (optional).

        Called at a tick boundary, before the next ``update``, so that replay
        reproduces the change at the same tick.
        """

    def view(self) -> Mapping[str, Any] | None:
        """Optional: a compact, JSON-able view of the state for people (pages draw it).

        Called after ``start`` and after each ``update``; what it returns is logged as a
        ``view`` event with that tick's observations. Give it a ``kind`` naming the
        drawing (``overcooked``). Return None (the default) to publish nothing.
        """
        return None

    @classmethod
    def prepare(cls, config: Mapping[str, Any]) -> None:
        """Optional: get ready to host trials of this config — compile, load, warm a cache.

        The environment service calls it once per implementation it serves, with the
        spec's config for it, before it joins its group: until then no trial is given to
        it, so the first trials do not wait for the work (nor time their actors out).
        """

    @classmethod
    def describe(cls, config: Mapping[str, Any], actor_class: str) -> Mapping[str, Any]:
        """Optional: Avro schemas for an actor class declared ``auto`` in the spec.

        Return ``{"observation": avro_schema, "action": avro_schema}`` (each a parsed
        Avro schema: a dict, or a name such as ``"long"``), and optionally a
        ``"default_action"`` for a spec that names none. Adapters (PettingZoo,
        Gymnasium) implement it from the env's spaces; so does
        ``trialog.adapters.declared.SpacesEnvironment`` from Gymnasium spaces you declare.
        """
        hint = (
            "; spaces declared as class attributes are read by a subclass of "
            "trialog.adapters.declared.SpacesEnvironment, not of Environment"
            if hasattr(cls, "observation_spaces") or hasattr(cls, "action_spaces")
            else ""
        )
        raise NotImplementedError(f"{cls.__name__} cannot describe actor class {actor_class!r}{hint}")


def steps_in_batches(cls: type) -> bool:
    """Whether instances of ``cls`` are stepped in batches: it overrides
    :meth:`Environment.update_batch` (or, not being an Environment, has one of its own)."""
    batch = getattr(cls, "update_batch", None)
    return batch is not None and getattr(batch, "__func__", batch) is not Environment.update_batch.__func__


def update_alone(env: Any, actions: Mapping[str, Any]) -> tuple[Step | None, str]:
    """How a runtime calls ``env.update``: its Step, or None and what went wrong."""
    try:
        step = env.update(actions)
        if not isinstance(step, Step):
            raise TypeError(f"update must return trialog.environment.Step, got {type(step).__name__}")
        return step, ""
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def update_together(
    kind: type, envs: Sequence[Any], actions: Sequence[Mapping[str, Any]]
) -> tuple[list[tuple[Step | None, str]], str]:
    """How a runtime calls ``kind.update_batch``: one :func:`update_alone`-like result per trial,
    and what went wrong with the call ("" if nothing). A call that raises or returns something
    else than one Step per trial is redone trial by trial, so that only a failing trial fails."""
    try:
        steps = list(kind.update_batch(envs, actions))
        if len(steps) != len(envs) or not all(isinstance(step, Step) for step in steps):
            raise TypeError(f"update_batch must return {len(envs)} trialog.environment.Step, got {steps!r:.200}")
        return [(step, "") for step in steps], ""
    except Exception as exc:
        return [update_alone(env, a) for env, a in zip(envs, actions, strict=True)], f"{type(exc).__name__}: {exc}"
