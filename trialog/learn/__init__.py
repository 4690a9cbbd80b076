"""Learning through the log: algorithms, memories and training presets.

Each algorithm is one readable file, top to bottom, in CleanRL's manner
(:mod:`trialog.learn.dqn`, :mod:`trialog.learn.ppo`, :mod:`trialog.learn.bc`): its
config dataclass, its network, the :class:`~trialog.actor.Policy` the actor service
runs (NumPy only: actor services need no tensor library) and the learner the learner
service runs (JAX). :mod:`trialog.learn.train` runs a preset's phases through the log;
:mod:`trialog.learn.in_process` runs the same preset, with the very same classes, in one
process over the environment directly (``trialog train PRESET --in-process``), to debug it
and to compare against.

Training needs the extra: ``pip install 'trialog[learn]'`` (JAX on CPU, optax,
safetensors). Why JAX: see docs/learning.md.

May import everything a service or a campaign does (the bus, controllers, the model
registry, the tools that run campaigns and plot them); it stands above them, below only
the command line.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping, Sequence
from hashlib import blake2b
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from trialog.errors import TrialogError

if TYPE_CHECKING:
    from trialog.actor import DecideRequest

C = TypeVar("C")


def require_jax():
    """Import JAX, or say which extra to install."""
    try:
        import jax
        import optax  # noqa: F401
    except ImportError:
        raise TrialogError("training needs JAX and optax: pip install 'trialog[learn]'") from None
    return jax


def config_of(cls: type[C], config: Mapping[str, Any]) -> C:
    """An algorithm's config dataclass from a spec's actor config; unknown keys are an
    error (a typo must not pass silently), lists become the tuples the dataclass holds."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(config) - names)
    if unknown:
        raise TrialogError(f"{cls.__name__}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in config.items()})


def takes_demonstrations(learner: Any, phase: str = "heatup") -> bool:
    """Whether a trial of ``phase`` is a demonstrator's for this learner: a heatup trial, when
    the learner takes demonstrations (DQN's ``demonstrator``); a learner that does not say
    takes none."""
    return phase == "heatup" and bool(getattr(learner, "takes_demonstrations", False))


def demonstrated(demonstration: bool) -> dict[str, bool]:
    """``add``'s keyword for steps a demonstrator acted: only a learner that takes
    demonstrations is told, so that one written before them keeps its ``add``."""
    return {"demonstration": True} if demonstration else {}


def decision_generator(request: DecideRequest) -> np.random.Generator:
    """The generator of one decision's random draws, seeded by (trial seed, actor, tick) only,
    as recovery requires: a decision made again draws the same. Making one costs ~25 µs: a
    policy that needs one or two numbers draws them with :func:`decision_uniform` instead."""
    return np.random.default_rng([request.trial.seed % 2**63, zlib.crc32(request.actor.name.encode()), request.tick])


def decision_uniform(request: DecideRequest, draw: int = 0) -> float:
    """The ``draw``-th uniform number in [0, 1) of one decision, a function of (trial seed,
    actor, tick, draw) only, as recovery requires: a decision made again draws the same. The
    top 53 bits of a BLAKE2b hash of those four: ~2 µs where seeding a generator costs ~23, and
    a policy service draws for nearly every decision it takes."""
    key = b"%d/%d/%d/" % (request.trial.seed, request.tick, draw) + request.actor.name.encode()
    return (int.from_bytes(blake2b(key, digest_size=8).digest(), "little") >> 11) * _TWO_TO_MINUS_53


_TWO_TO_MINUS_53 = 1.0 / (1 << 53)


def sampled_actions(requests: Sequence[DecideRequest], probabilities: np.ndarray) -> list[int]:
    """The action each request's :func:`decision_uniform` draws from its row of
    ``probabilities``: the uniform placed in the row's normalised cumulative sums (inverse
    transform sampling, as ``Generator.choice(n, p=row)`` does, without its checks of the row)."""
    cdf = np.cumsum(probabilities, axis=1, dtype=np.float64)
    if not np.isfinite(cdf[:, -1]).all():
        raise ValueError("the model's action probabilities are not finite")
    cdf /= cdf[:, -1:]
    return [int(c.searchsorted(decision_uniform(r), side="right")) for r, c in zip(requests, cdf)]


def trained_on_every_step(meta: Mapping[str, Any], settled: int, env_steps: int) -> bool:
    """Whether a version (its metadata) is as trained as the learner makes it at ``env_steps``
    (counted as the learner counts them): the learner says so (``settled``: it has taken in that
    many, no round owed), or no round is owed before the steps reach its ``next_round_at``. A learner
    in rounds may have taken in every step and still owe rounds (it fell behind): its steps taken in
    say nothing of its training. Versions of a learner that does not say: by the steps they saw."""
    if settled >= env_steps:
        return True
    if "next_round_at" in meta:
        return meta["next_round_at"] > env_steps
    return meta.get("env_steps", 0) >= env_steps
