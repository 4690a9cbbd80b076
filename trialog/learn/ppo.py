"""PPO (Schulman et al. 2017) through Trialog's log, in one file, CleanRL style.

On-policy: the learner trains only on transitions acted by the version it is at.
It publishes version 1 (its initial weights) at once, collects whole trials of that
version until it has ``rollout_steps`` transitions — discarding, and saying so, any
acted by an older version — then runs ``update_epochs`` of clipped-objective updates
and publishes the next version. Actors sample from the policy with draws seeded by
(trial seed, actor, tick); ``evaluate`` trials act greedily.

Read top to bottom: config, policy (NumPy), learner (JAX). ``trialog train
presets/ppo_cartpole.py --in-process`` drives the same two classes in one process
(:mod:`trialog.learn.in_process`).
"""

from __future__ import annotations

import dataclasses
import threading
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trialog.actor import DecideRequest, Policy
from trialog.errors import TrialogError
from trialog.learn import config_of
from trialog.learn.bc import softmax
from trialog.learn.memory import Transitions, flat_observation
from trialog.learn.nets import init_mlp, mlp, prefixed, unprefixed
from trialog.learn.spaces import missing_sizes, require_sizes


@dataclass(frozen=True)
class PPOConfig:
    model: str = "ppo"
    observation_size: int | None = None  # None: from the actor class's spaces (as DQNConfig's)
    actions: int | None = None
    hidden: tuple[int, ...] = (64, 64)
    learning_rate: float = 2.5e-4
    rollout_steps: int = 512  # transitions of one version per update (whole trials: at least this many)
    gamma: float = 0.99
    gae_lambda: float = 0.95
    minibatches: int = 4
    update_epochs: int = 4
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    seed: int = 1

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> PPOConfig:
        return config_of(cls, config)


# --- acting -------------------------------------------------------------------------------------------------


class PPOPolicy(Policy):
    sizes_from_spaces = True  # observation_size and actions come from the actor class's spaces

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.cfg = PPOConfig.of(config)
        self.pi: dict[str, np.ndarray] | None = None

    @classmethod
    def learner(cls, config: Mapping[str, Any]) -> PPOLearner:
        return PPOLearner(PPOConfig.of(config))

    def load(self, version) -> None:
        self.pi = unprefixed("pi", version.tensors())

    def decide_batch(self, requests: Sequence[DecideRequest]) -> list[int]:
        if self.pi is None:  # the learner publishes version 1 at once: uniform only until it arrives
            if self.cfg.actions is None:
                raise TrialogError(missing_sizes("PPOPolicy", "actions"))
            probabilities = np.full((len(requests), self.cfg.actions), 1.0 / self.cfg.actions)
        else:
            probabilities = softmax(mlp(self.pi, np.stack([flat_observation(r.observation) for r in requests])))
        out = []
        for r, p in zip(requests, probabilities):
            if r.trial.phase == "evaluate" and self.pi is not None:
                out.append(int(p.argmax()))
            else:
                rng = np.random.default_rng([r.trial.seed % 2**63, zlib.crc32(r.actor.name.encode()), r.tick])
                out.append(int(rng.choice(len(p), p=p)))
        return out


# --- learning -----------------------------------------------------------------------------------------------


class PPOLearner:
    algorithm = "ppo"
    on_policy = True
    publish_initial = True  # actors must act with a version before there is anything to learn from

    def __init__(self, cfg: PPOConfig) -> None:
        from trialog.learn import require_jax

        jax = require_jax()
        import jax.numpy as jnp
        import optax

        require_sizes(cfg, "PPOLearner")
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        sizes = [cfg.observation_size, *cfg.hidden]
        self.params = {
            "pi": {k: jnp.asarray(v) for k, v in init_mlp(self.rng, [*sizes, cfg.actions], last_scale=0.01).items()},
            "v": {k: jnp.asarray(v) for k, v in init_mlp(self.rng, [*sizes, 1]).items()},
        }
        self.optimizer = optax.chain(
            optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(cfg.learning_rate, eps=1e-5)
        )
        self.opt_state = self.optimizer.init(self.params)
        self.lock = threading.Lock()
        self.episodes: list[Transitions] = []  # of the current version, whole trials
        self.env_steps = 0
        self.rounds = 0
        self.updates = 0
        self.round_scalars: dict[str, float] = {}  # the last update's means, for the curves

        def loss(params, b):
            logits = mlp(params["pi"], b["obs"], jnp)
            logp_all = jax.nn.log_softmax(logits)
            logp = jnp.take_along_axis(logp_all, b["actions"][:, None], axis=1)[:, 0]
            ratio = jnp.exp(logp - b["logp"])
            adv = (b["adv"] - b["adv"].mean()) / (b["adv"].std() + 1e-8)
            pg = jnp.maximum(-adv * ratio, -adv * jnp.clip(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
            value = mlp(params["v"], b["obs"], jnp)[:, 0]
            v_loss = 0.5 * ((value - b["returns"]) ** 2).mean()
            entropy = -(jnp.exp(logp_all) * logp_all).sum(axis=1).mean()
            parts = {"policy_loss": pg, "value_loss": v_loss, "entropy": entropy, "value_mean": value.mean()}
            return pg - cfg.ent_coef * entropy + cfg.vf_coef * v_loss, parts

        def step(carry, batch):
            params, opt_state = carry
            (value, parts), grads = jax.value_and_grad(loss, has_aux=True)(params, batch)
            updates, opt_state = self.optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), (value, parts)

        self._update = jax.jit(lambda params, opt_state, batches: jax.lax.scan(step, (params, opt_state), batches))

    def _forward(self, params, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log-probabilities and values in NumPy (episodes have any length: no recompilation)."""
        pi = {k: np.asarray(v) for k, v in params["pi"].items()}
        v = {k: np.asarray(x) for k, x in params["v"].items()}
        logits = mlp(pi, obs)
        logits = logits - logits.max(axis=1, keepdims=True)
        return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True)), mlp(v, obs)[:, 0]

    def add(self, t: Transitions, *, count: bool = True, follows: int = -1) -> np.ndarray:
        with self.lock:
            self.env_steps += len(t) if count else 0
            self.episodes.append(t)
        return np.full(
            len(t), -1, np.int64
        )  # no serials: a trial's rewards are final by the time it trains (no late corrections)

    def set_rewards(self, serials: np.ndarray, rewards: np.ndarray) -> None:
        pass

    def rounds_due(self) -> int:
        return int(sum(len(e) for e in self.episodes) >= self.cfg.rollout_steps)

    def train_round(self) -> float:
        with self.lock:
            episodes, self.episodes = self.episodes, []
        # Exactly rollout_steps transitions (the first ones): one compiled shape for every update.
        batch = {k: v[: self.cfg.rollout_steps] for k, v in self._advantages(episodes).items()}
        n = self.cfg.rollout_steps
        size = n // self.cfg.minibatches
        order = np.concatenate(
            [self.rng.permutation(n)[: size * self.cfg.minibatches] for _ in range(self.cfg.update_epochs)]
        )
        batches = {
            k: v[order].reshape(self.cfg.update_epochs * self.cfg.minibatches, size, *v.shape[1:])
            for k, v in batch.items()
        }
        (self.params, self.opt_state), (losses, parts) = self._update(self.params, self.opt_state, batches)
        self.rounds += 1
        self.updates += self.cfg.update_epochs * self.cfg.minibatches
        self.round_scalars = {"loss": float(losses.mean()), **{k: float(v.mean()) for k, v in parts.items()}}
        return self.round_scalars["loss"]

    def _advantages(self, episodes: list[Transitions]) -> dict[str, np.ndarray]:
        """GAE per trial (each a whole episode); a truncated end bootstraps from V(next)."""
        cfg, parts = self.cfg, []
        for e in episodes:
            logp_all, values = (np.asarray(x) for x in self._forward(self.params, e.observations))
            _, next_values = (np.asarray(x) for x in self._forward(self.params, e.next_observations))
            adv = np.zeros(len(e), np.float32)
            last = 0.0
            for t in reversed(range(len(e))):
                nonterminal = 1.0 - e.dones[t]
                delta = e.rewards[t] + cfg.gamma * next_values[t] * nonterminal - values[t]
                continues = nonterminal if t < len(e) - 1 else 0.0  # the next transition is the same episode's
                last = delta + cfg.gamma * cfg.gae_lambda * continues * last
                adv[t] = last
            parts.append({"obs": e.observations, "actions": e.actions, "logp": logp_all[np.arange(len(e)), e.actions],
                          "adv": adv, "returns": adv + values})  # fmt: skip
        return {
            k: np.concatenate([p[k] for p in parts]).astype(np.int32 if k == "actions" else np.float32)
            for k in parts[0]
        }

    def policy_weights(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in self.params["pi"].items()}

    def tensors(self) -> dict[str, np.ndarray]:
        import jax

        opt_leaves = jax.tree_util.tree_leaves(self.opt_state)
        return {
            **prefixed("pi", self.params["pi"]),
            **prefixed("v", self.params["v"]),
            **{f"opt/{i}": np.asarray(v) for i, v in enumerate(opt_leaves)},
        }

    def metadata(self) -> dict[str, Any]:
        return {
            "env_steps": self.env_steps,
            "rounds": self.rounds,
            "updates": self.updates,
            "config": dataclasses.asdict(self.cfg),
        }

    def restore(self, tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        import jax
        import jax.numpy as jnp

        self.params = {"pi": {k: jnp.asarray(v) for k, v in unprefixed("pi", tensors).items()},
                       "v": {k: jnp.asarray(v) for k, v in unprefixed("v", tensors).items()}}  # fmt: skip
        leaves, treedef = jax.tree_util.tree_flatten(self.optimizer.init(self.params))
        self.opt_state = jax.tree_util.tree_unflatten(
            treedef, [jnp.asarray(tensors[f"opt/{i}"]) for i in range(len(leaves))]
        )
        self.env_steps, self.rounds, self.updates = (int(meta.get(k, 0)) for k in ("env_steps", "rounds", "updates"))
