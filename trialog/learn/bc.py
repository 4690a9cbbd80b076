"""Behaviour cloning from exported demonstrations, in one file, CleanRL style.

Coach's batch RL without the RL: a classifier from observation to action, trained on
what someone did — the Overcooked planner's actions, or people's (their seats'
rows) — as ``trialog export`` writes them (Parquet, one row per tick and actor)::

    trialog export --implementation planner --out demos.parquet
    python -m trialog.learn.bc --demos demos.parquet --model overcooked-bc --publish

``--publish`` sends the weights to ``models``; an actor implementation with entry
``trialog.learn.bc:BCPolicy`` and ``config: {model: overcooked-bc}`` plays them
(loaded without a restart). The policy samples from the cloned distribution with
draws seeded by (trial seed, actor, tick), which keeps a cook from freezing in the
loops a greedy clone falls into, and keeps recovery deterministic.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trialog.actor import DecideRequest, Policy
from trialog.errors import TrialogError
from trialog.learn import config_of, sampled_actions
from trialog.learn.memory import flat_observation
from trialog.learn.nets import init_mlp, mlp, prefixed, unprefixed
from trialog.runtime.process import run_async


@dataclass(frozen=True)
class BCConfig:
    model: str = "bc"
    observation_size: int = 892  # CoGrid's Overcooked feature vector
    actions: int = 7
    hidden: tuple[int, ...] = (256, 256)
    learning_rate: float = 1e-3
    epochs: int = 40
    batch_size: int = 256
    seed: int = 1
    greedy: bool = False  # argmax instead of sampling

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> BCConfig:
        return config_of(cls, config)


# --- acting -------------------------------------------------------------------------------------------------


class BCPolicy(Policy):
    """Plays the cloned behaviour; before any model is published, uniformly at random."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.cfg = BCConfig.of(config)
        self.params: dict[str, np.ndarray] | None = None

    def load(self, version) -> None:
        self.params = unprefixed("pi", version.tensors())

    def decide_batch(self, requests: Sequence[DecideRequest]) -> list[int]:
        probabilities = np.full((len(requests), self.cfg.actions), 1.0 / self.cfg.actions)
        if self.params is not None:
            logits = mlp(self.params, np.stack([flat_observation(r.observation) for r in requests]))
            probabilities = softmax(logits)
        if self.cfg.greedy and self.params is not None:
            return [int(a) for a in probabilities.argmax(axis=1)]
        return sampled_actions(requests, probabilities)


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


# --- the demonstrations -------------------------------------------------------------------------------------


def demonstrations(path: str, implementation: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(observations, actions) from an export file: rows with an action, of ``implementation`` if given."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["implementation", "observation", "action", "timed_out"])
    obs, actions = [], []
    for impl, o, a, timed_out in zip(
        *(table.column(c).to_pylist() for c in ("implementation", "observation", "action", "timed_out"))
    ):
        if a is None or timed_out or (implementation and impl != implementation):
            continue
        obs.append(flat_observation(json.loads(o)))
        actions.append(int(json.loads(a)))
    if not obs:
        raise TrialogError(f"{path}: no demonstrations" + (f" of {implementation!r}" if implementation else ""))
    return np.stack(obs), np.array(actions, np.int32)


# --- learning -----------------------------------------------------------------------------------------------


def train(cfg: BCConfig, observations: np.ndarray, actions: np.ndarray, *, log=print) -> dict[str, np.ndarray]:
    """Cross-entropy on minibatches for ``epochs`` passes; returns the policy's parameters."""
    from trialog.learn import require_jax

    jax = require_jax()
    import jax.numpy as jnp
    import optax

    rng = np.random.default_rng(cfg.seed)
    params = {
        k: jnp.asarray(v)
        for k, v in init_mlp(rng, [cfg.observation_size, *cfg.hidden, cfg.actions], last_scale=0.01).items()
    }
    optimizer = optax.adam(cfg.learning_rate)
    opt_state = optimizer.init(params)

    def loss(p, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(mlp(p, x, jnp), y).mean()

    @jax.jit
    def step(p, s, x, y):
        value, grads = jax.value_and_grad(loss)(p, x, y)
        updates, s = optimizer.update(grads, s)
        return optax.apply_updates(p, updates), s, value

    n = len(actions)
    for epoch in range(cfg.epochs):
        order = rng.permutation(n)
        losses = []
        for start in range(0, n - cfg.batch_size + 1, cfg.batch_size):  # whole batches only: one compiled shape
            idx = order[start : start + cfg.batch_size]
            params, opt_state, value = step(params, opt_state, observations[idx], actions[idx])
            losses.append(float(value))
        if log and (epoch % 10 == 9 or epoch == cfg.epochs - 1):
            accuracy = float((np.asarray(mlp(params, observations[:4096], jnp)).argmax(1) == actions[:4096]).mean())
            log(f"epoch {epoch + 1}: loss {np.mean(losses):.3f}, accuracy on demonstrations {accuracy:.2f}")
    return {k: np.asarray(v) for k, v in params.items()}


async def publish(settings, cfg: BCConfig, params: Mapping[str, np.ndarray], demos: int) -> int:
    """Publish the weights as the model's next version; returns the version number."""
    from trialog import model_registry
    from trialog.bus import connect

    async with connect(settings) as bus:
        latest = (await model_registry.latest_versions(bus)).get(cfg.model)
        number = (latest.version if latest else 0) + 1
        meta = {"demonstrations": demos, "config": dataclasses.asdict(cfg)}
        await model_registry.publish(
            bus,
            model_registry.make_version(
                cfg.model, number, "bc", prefixed("pi", params), meta, store=settings.model_store
            ),
        )
    return number


def main(argv: list[str] | None = None) -> int:
    from trialog.settings import add_arguments, from_args

    parser = argparse.ArgumentParser(description="Behaviour cloning from a trialog export (Parquet).")
    parser.add_argument("--demos", required=True, help="the export file")
    parser.add_argument("--implementation", help="clone only the rows of this implementation (e.g. planner, human)")
    parser.add_argument(
        "--publish", action="store_true", help="publish the weights to `models` (connection settings below)"
    )
    for f in dataclasses.fields(BCConfig):
        if f.name != "hidden":
            parser.add_argument(
                f"--{f.name.replace('_', '-')}",
                type=type(f.default) if f.type != "bool" else lambda s: s.lower() in ("1", "true", "yes"),
                default=f.default,
            )
    add_arguments(parser)
    args = parser.parse_args(argv)
    cfg = BCConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(BCConfig) if f.name != "hidden"})
    t0 = time.monotonic()
    obs, actions = demonstrations(args.demos, args.implementation)
    print(
        f"{len(actions)} demonstrations, {obs.shape[1]} features, "
        f"actions {np.bincount(actions, minlength=cfg.actions).tolist()}"
    )
    params = train(dataclasses.replace(cfg, observation_size=obs.shape[1]), obs, actions)
    print(f"trained in {time.monotonic() - t0:.0f} s")
    if args.publish:
        print(f"published {cfg.model} v{run_async(publish(from_args(args), cfg, params, len(actions)))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
