"""Learning through the log: algorithms, memories and training presets.

Each algorithm is one readable file, top to bottom, in CleanRL's manner
(:mod:`trialog.learn.dqn`, :mod:`trialog.learn.ppo`, :mod:`trialog.learn.bc`): its
config dataclass, its network, the :class:`~trialog.actor.Policy` the actor service
runs (NumPy only: actor services need no tensor library), the learner the learner
service runs (JAX), and an in-process loop over a Gymnasium env with the very same
classes, to compare against.

Training needs the extra: ``pip install 'trialog[learn]'`` (JAX on CPU, optax,
safetensors). Why JAX: see docs/learning.md.
"""

from __future__ import annotations

from trialog.errors import TrialogError


def require_jax():
    """Import JAX, or say which extra to install."""
    try:
        import jax
        import optax  # noqa: F401
    except ImportError:
        raise TrialogError("training needs JAX and optax: pip install 'trialog[learn]'") from None
    return jax
