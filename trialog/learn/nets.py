"""The one network shape every algorithm here uses: a multi-layer perceptron.

Parameters are a flat ``{"w0", "b0", "w1", ...}`` dict of arrays, so they are
safetensors as they are (``prefix/w0`` ...) and the same dict runs in JAX (training)
and in NumPy (acting, in actor services without a tensor library).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def init_mlp(rng: np.random.Generator, sizes: Sequence[int], *, last_scale: float = 1.0) -> dict[str, np.ndarray]:
    """He-uniform hidden layers (ReLU), the last layer scaled by ``last_scale``; zero biases."""
    params = {}
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        limit = np.sqrt(6.0 / n_in) * (last_scale if i == len(sizes) - 2 else 1.0)
        params[f"w{i}"] = rng.uniform(-limit, limit, (n_in, n_out)).astype(np.float32)
        params[f"b{i}"] = np.zeros(n_out, np.float32)
    return params


def mlp(params: Mapping[str, Any], x: Any, xp: Any = np) -> Any:
    """Forward pass with ReLU between layers; ``xp`` is ``numpy`` or ``jax.numpy``."""
    layers = len(params) // 2
    for i in range(layers):
        x = x @ params[f"w{i}"] + params[f"b{i}"]
        if i < layers - 1:
            x = xp.maximum(x, 0)
    return x


def prefixed(prefix: str, params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``{"w0": ...}`` as ``{"prefix/w0": ...}`` NumPy arrays, for safetensors."""
    return {f"{prefix}/{k}": np.asarray(v) for k, v in params.items()}


def unprefixed(prefix: str, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    start = prefix + "/"
    return {k[len(start) :]: v for k, v in tensors.items() if k.startswith(start)}
