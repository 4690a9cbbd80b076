"""What environment and actor runtimes both need to know about a started trial."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from trialog.environment import ActorInfo, TrialInfo
from trialog.protocol.codec import Schema, SchemaStore
from trialog.protocol.events import ActorSpec, ResolvedTrial


def loads(text: str | None) -> Any:
    return orjson.loads(text) if text else {}


def dumps(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()


@dataclass(frozen=True)
class ClassSchemas:
    """An actor class as the runtimes use it: its schemas parsed (and as JSON for user code) and
    its default action decoded; read by :func:`class_schemas` from the
    :class:`~trialog.protocol.events.ActorClassSpec` that ``trial.started`` carries (made from the
    spec's :class:`~trialog.spec.ActorClass` by its ``wire``)."""

    observation: Schema
    action: Schema
    default_action: Any
    has_default_action: bool
    observation_json: dict
    action_json: dict


def actor_info(actor: ActorSpec) -> ActorInfo:
    """An actor of a resolved trial as user code sees it (its config parsed)."""
    return ActorInfo(actor.name, actor.actor_class, actor.implementation, loads(actor.config), actor.client)


def trial_info(started: ResolvedTrial) -> TrialInfo:
    return TrialInfo(
        trial_id=started.trial_id,
        seed=started.seed,
        config=loads(started.environment_config),
        actors=tuple(actor_info(a) for a in started.actors),
        parameters=loads(started.parameters),
        max_ticks=started.max_ticks,
        experiment=started.experiment,
        phase=started.phase,
    )


def operator_code(info: TrialInfo, factory: Any, operator_config: Mapping[str, Any]) -> TrialInfo:
    """The trial as the environment sees it, with the config keys that name code
    (``factory.CODE_KEYS``, e.g. an adapter's ``env`` and ``rewards``) taken from the
    spec this process was started with — never from a record (I-9)."""
    keys = getattr(factory, "CODE_KEYS", ())
    if not keys:
        return info
    config = {k: v for k, v in info.config.items() if k not in keys}
    config.update({k: operator_config[k] for k in keys if k in operator_config})
    return dataclasses.replace(info, config=config)


def class_schemas(store: SchemaStore, started: ResolvedTrial) -> dict[str, ClassSchemas]:
    """Register the actor-class schemas a trial carries and return them by class name."""
    out = {}
    for c in started.actor_classes:
        default = None if c.default_action is None else orjson.loads(c.default_action)
        out[c.name] = ClassSchemas(
            observation=store.register(c.observation_schema),
            action=store.register(c.action_schema),
            default_action=default,
            has_default_action=c.default_action is not None,
            observation_json=orjson.loads(c.observation_schema),
            action_json=orjson.loads(c.action_schema),
        )
    return out


def matches(receiver: str, actor: str, actor_class: str) -> bool:
    """Does an address (name, ``*`` or ``class.*``) name this actor? (Whether a reward or
    message sent to it reaches the actor is :func:`reaches`.)"""
    return receiver == actor or receiver == "*" or receiver == f"{actor_class}.*"


def reaches(receiver: str, sender: str, actor: str, actor_class: str) -> bool:
    """Does a reward or message from ``sender`` addressed to ``receiver`` (name, ``*`` or
    ``class.*``) reach this actor? As :func:`matches`, except that nothing reaches its own
    sender: ``*`` and the sender's ``class.*`` leave the sender out (and a reward naming
    its sender is refused outright, :func:`trialog.protocol.owners.reward_problem`). The one
    rule for live delivery, the datalog, returns and analytics."""
    return sender != actor and (receiver == actor or receiver == "*" or receiver == f"{actor_class}.*")
