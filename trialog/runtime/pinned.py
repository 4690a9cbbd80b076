"""Model versions pinned by a trial: an actor decided by a policy of its own.

A policy follows one model and acts with its newest version (:mod:`trialog.runtime.actor_runtime`).
A trial may instead pin a version for one of its actors — the actor's config ``model:
NAME@VERSION``, where the spec lets a start request set ``model`` (``overridable``, I-9) — and
that actor is then decided by another instance of the policy, holding that version, while the
implementation's other trials go on with the newest: ``trialog train`` evaluates the version
that has seen every step so far this way while the next stretch of training runs.

The version comes from those the follower brought lately, else from ``models`` (read in the
worker thread); one policy per pinned version, shared by the actors that pin it, dropped when the
last of their trials ends (one kept, to be reused without building another).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trialog.actor import Policy
from trialog.environment import ActorInfo
from trialog.errors import TrialogError
from trialog.model_registry import ModelVersion, parse_ref, read_catalog
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)

RECENT_VERSIONS = 8  # versions of the followed model kept at hand for trials that pin one
FETCH_TIMEOUT_S = 60  # reading ``models`` for a pinned version the follower did not bring

Pin = tuple[str, int]  # (model, version)


@dataclass
class _Pinned:
    policy: Policy
    users: int = 1  # actors of live trials pinned to it
    failed: str = ""  # why the version could not be loaded ("" once loaded, or while loading)


def pin_of(followed: str | None, actor: ActorInfo) -> Pin | None:
    """The model version the actor's config pins, when it is not the model the policy follows."""
    model = actor.config.get("model")
    if not model or model == followed:
        return None
    name, number = parse_ref(str(model))
    if number is None:
        raise TrialogError(
            f"its config names model {model!r}, not the implementation's {followed!r}: a trial may pin a version, "
            "NAME@VERSION"
        )
    return name, number


def pins_allowed(spec, played: Mapping[str, str]) -> bool:
    """Whether a start request may pin the model of the actors in ``played`` (actor → its
    implementation): the spec lets it set their ``model``, and every other key of the trial's
    actors' own config (such a request names the actor list whole; I-9)."""
    for a in spec.trial.actors:
        impl = spec.actors.get(played.get(a.name, a.implementation))
        keys = {*a.config, *(("model",) if a.name in played else ())}
        if impl is None or not keys <= set(impl.overridable):
            return False
    return True


def pinned_actors(spec, implementations: Mapping[str, str], pinned: str, ref: str) -> list[dict[str, Any]]:
    """The trial's actors as a start request names them, those of implementation ``pinned``
    acting with model version ``ref`` (``NAME@VERSION``)."""
    named = [(a, implementations.get(a.name, a.implementation)) for a in spec.trial.actors]
    return [
        {"name": a.name, "class": a.actor_class, "implementation": impl,
         "config": {**a.config, **({"model": ref} if impl == pinned else {})}}
        for a, impl in named
    ]  # fmt: skip


class PinnedVersions:
    """The policies of one implementation that hold versions pinned by live trials."""

    def __init__(self, implementation: str, make_policy: Callable[[], Policy]) -> None:
        self.implementation = implementation
        self.make_policy = make_policy
        self.recent: dict[Pin, ModelVersion] = {}  # the followed model's last versions
        self.pinned: dict[Pin, _Pinned] = {}
        self.spare: Policy | None = None  # a pinned policy no trial uses any more, kept to be reused
        self.event_loop: asyncio.AbstractEventLoop | None = None

    def remember(self, version: ModelVersion) -> None:
        """A version of the followed model, as the follower brings it."""
        self.recent[(version.model, version.version)] = version
        while len(self.recent) > RECENT_VERSIONS:
            del self.recent[next(iter(self.recent))]

    def policy(self, pin: Pin) -> Policy | None:
        """The policy deciding for ``pin``; None if no live trial pins it or it did not load."""
        pinned = self.pinned.get(pin)
        return None if pinned is None or pinned.failed else pinned.policy

    def use(self, pin: Pin) -> Policy | None:
        """An actor of a starting trial pins ``pin``: a new policy to load in the worker thread
        (:meth:`load`, before any decision of the trial), or None when one holds it already."""
        self.event_loop = asyncio.get_running_loop()
        pinned = self.pinned.get(pin)
        if pinned is not None:
            pinned.users += 1
            return None
        policy, self.spare = self.spare or self.make_policy(), None
        self.pinned[pin] = _Pinned(policy)
        return policy

    def release(self, pin: Pin) -> None:
        """An actor pinning ``pin`` is done; with the last one, its policy goes (to be reused)."""
        pinned = self.pinned.get(pin)
        if pinned is None:
            return
        pinned.users -= 1
        if pinned.users <= 0:
            del self.pinned[pin]
            self.spare = pinned.policy

    def load(self, pin: Pin, policy: Policy, bus) -> str:
        """In the worker thread: ``policy`` takes the version; "" or why it could not."""
        model, number = pin
        try:
            version = self.recent.get(pin)
            if version is None:
                catalog = asyncio.run_coroutine_threadsafe(read_catalog(bus), self.event_loop)
                version = catalog.result(timeout=FETCH_TIMEOUT_S).find(f"{model}@{number}")
            policy.load(version)
            policy.policy_version = version.version
        except Exception as exc:
            reason = f"the pinned model version {model}@{number} could not be loaded: {type(exc).__name__}: {exc}"
            log.error("pinned model version not loaded", implementation=self.implementation, error=reason)
            return reason
        log.info("pinned model version loaded", implementation=self.implementation, model=model, version=number)
        return ""

    def failed(self, pin: Pin, reason: str) -> None:
        pinned = self.pinned.get(pin)
        if pinned is not None:
            pinned.failed = reason
