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
from collections.abc import Mapping
from typing import Any, TypeVar

from trialog.errors import TrialogError

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
