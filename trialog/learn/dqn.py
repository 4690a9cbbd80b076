"""DQN (Mnih et al. 2015) through Trialog's log, in one file, CleanRL style.

Read top to bottom: the config (also the spec's actor config and the preset's
``agent`` overrides), the policy the actor service runs (NumPy) and the learner the
learner service runs (JAX). ``trialog train presets/dqn_cartpole.py --in-process``
drives the same two classes in one process (:mod:`trialog.learn.in_process`), the
baseline that ``bench/learning.py`` compares Trialog against.

How the phases act: ``heatup`` uniform random (fills the memory, no training), or the
``demonstrator``'s actions when the config names one;
``train`` ε-greedy, ε decaying linearly with the env steps the learner has seen;
``evaluate`` at ``eval_e`` (0 by default: greedy); outside experiments greedy.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trialog.actor import Agent, DecideRequest, Policy
from trialog.errors import TrialogError
from trialog.learn import config_of, decision_uniform
from trialog.learn.memory import ReplayMemory, flat_observation
from trialog.learn.nets import init_mlp, mlp, prefixed, unprefixed
from trialog.learn.offpolicy import OffPolicyLearner
from trialog.learn.spaces import missing_sizes, require_sizes
from trialog.spec import load_entry

DEMONSTRATING_AT_MOST = 4096  # heatup trials whose demonstrator's agent is kept (far more than run at once)


@dataclass(frozen=True)
class DQNConfig:
    model: str = "dqn"  # the model's name on `models`
    # None: from the actor class's spaces (trialog.learn.spaces), as `trialog train` and the learner
    # service size them; a value set here must agree with the spaces.
    observation_size: int | None = None
    actions: int | None = None
    hidden: tuple[int, ...] = (128, 128)
    learning_rate: float = 2.3e-3
    learning_rate_decay_steps: int = (
        50_000  # falls linearly to 0 by this many env steps (0: constant), as after solving
    )
    # the task a constant rate keeps shaking the Q-values and the policy collapses
    max_grad_norm: float = 10.0  # gradients clipped to this global norm
    buffer_size: int = 100_000
    gamma: float = 0.99
    n_step: int = (
        3  # returns over up to this many steps of a sequence: a failure's cost reaches the states that led to it in
    )
    # fewer target refreshes (1: plain one-step DQN, which on CartPole solves the task and does not stay solved)
    batch_size: int = 64
    learning_starts: int = 1_000  # env steps before the first update (the heatup phase)
    train_frequency: int = 256  # env steps between two training rounds
    gradient_steps: int = (
        512  # updates per round: two per env step, so that learning is done before the rate has decayed
    )
    tau: float = 1.0  # at each refresh the target network moves this fraction towards the Q-network (1: a copy)
    target_update_interval: int = (
        512  # gradient steps between two target refreshes, counted over the whole run (inside a
    )
    # round too): the first update of every such stretch starts from a refreshed target
    double: bool = True  # Double DQN targets: the Q-network picks the next action, the target network values it
    huber: bool = False  # Huber loss rather than the squared error (on CartPole it learns slower here)
    start_e: float = 1.0
    end_e: float = 0.04
    exploration_steps: int = 8_000  # ε decays linearly from start_e to end_e over these env steps
    # ε in evaluation trials. Mnih et al. (2015) evaluate at 0.05: two deterministic players (a
    # cook and its partner, or one network in both seats) that block each other stay blocked.
    eval_e: float = 0.0
    # An Agent ("package.module:Class", one per trial) that acts in heatup trials instead of
    # uniform random actions: DQfD (Hester et al. 2018). Its steps stay in the memory marked as
    # demonstrations, and on those a large-margin loss keeps the demonstrated action's value
    # `margin` above every other's, weighted `demonstration_weight` beside the TD loss. Where the
    # reward is sparse (a soup is served after dozens of steps), ε-greedy rarely finds it; the
    # demonstrations alone, without the margin, were measured not to help (docs/learning.md).
    demonstrator: str | None = None
    margin: float = 0.8  # DQfD's
    demonstration_weight: float = 1.0  # DQfD's λ2
    seed: int = 1  # network initialisation and minibatch sampling

    def __post_init__(self) -> None:
        for name in ("start_e", "end_e", "eval_e"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                raise TrialogError(f"DQNConfig: {name} is a probability (0 to 1), not {value!r}")
        for name in ("margin", "demonstration_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise TrialogError(f"DQNConfig: {name} is a number ≥ 0, not {value!r}")
        if self.demonstrator is not None and not isinstance(self.demonstrator, str):
            raise TrialogError(
                f"DQNConfig: demonstrator is an Agent's 'package.module:Class', not {self.demonstrator!r}"
            )

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> DQNConfig:
        return config_of(cls, config)

    def updates_by(self, env_steps: int) -> int:
        """Gradient steps done once the learner has seen this many env steps."""
        rounds = env_steps // self.train_frequency - self.learning_starts // self.train_frequency
        return max(0, rounds) * self.gradient_steps

    def epsilon(self, env_steps: int) -> float:
        fraction = min(1.0, env_steps / max(1, self.exploration_steps))
        return self.start_e + fraction * (self.end_e - self.start_e)


# --- acting (actor services; NumPy only) ------------------------------------------------------------


class DQNPolicy(Policy):
    """Acts for every pending observation of every trial with one forward pass."""

    sizes_from_spaces = True  # observation_size and actions come from the actor class's spaces

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.cfg = DQNConfig.of(config)
        self.q: dict[str, np.ndarray] | None = None  # no model yet: random actions
        self.env_steps = 0  # how far training was when the loaded version was published
        self.demonstrator: type[Agent] | None = None
        if self.cfg.demonstrator is not None:
            self.demonstrator = load_entry(self.cfg.demonstrator, what="DQNConfig.demonstrator")
            if not (isinstance(self.demonstrator, type) and issubclass(self.demonstrator, Agent)):
                raise TrialogError(f"DQNConfig.demonstrator {self.cfg.demonstrator!r} is not an Agent class")
        # The demonstrator's agents of heatup trials, oldest first; a trial's agent sees each of
        # its observations in tick order, as any Agent does. Dropped at the trial's end, and
        # bounded besides (an end the service never saw).
        self._demonstrating: OrderedDict[tuple[str, str], Agent] = OrderedDict()

    @classmethod
    def learner(cls, config: Mapping[str, Any]) -> DQNLearner:
        return DQNLearner(DQNConfig.of(config))

    def load(self, version) -> None:
        self.set_weights(unprefixed("q", version.tensors()), version.meta.get("env_steps", 0))

    def set_weights(self, q: Mapping[str, np.ndarray], env_steps: int) -> None:
        self.q, self.env_steps = dict(q), int(env_steps)

    def decide_batch(self, requests: Sequence[DecideRequest]) -> list[int]:
        greedy = np.zeros(len(requests), np.int64)
        if self.q is not None:
            greedy = mlp(self.q, np.stack([flat_observation(r.observation) for r in requests])).argmax(axis=1)
        actions = []
        for r, g in zip(requests, greedy):
            if self.demonstrator is not None and r.trial.phase == "heatup":
                actions.append(int(self._demonstrating_agent(r).decide(r.observation)))
                continue
            explore = self._epsilon(r.trial.phase)
            if explore <= 0.0:  # greedy: no draw can explore, so none is made
                actions.append(int(g))
                continue
            n = self._actions()  # min: a uniform just under 1, times n, can round up to n
            actions.append(min(int(decision_uniform(r, 1) * n), n - 1) if decision_uniform(r) < explore else int(g))
        return actions

    def trial_ended(self, trial_id: str) -> None:
        for key in [k for k in self._demonstrating if k[0] == trial_id]:
            del self._demonstrating[key]

    def _demonstrating_agent(self, r: DecideRequest) -> Agent:
        key = (r.trial.trial_id, r.actor.name)
        agent = self._demonstrating.get(key)
        if agent is None:
            agent = self._demonstrating[key] = self.demonstrator(r.trial, r.actor)
            if len(self._demonstrating) > DEMONSTRATING_AT_MOST:
                self._demonstrating.popitem(last=False)
        return agent

    def _actions(self) -> int:
        """How many actions to explore among: the config's, else the loaded network's outputs."""
        if self.cfg.actions is not None:
            return self.cfg.actions
        if self.q is None:
            raise TrialogError(missing_sizes("DQNPolicy", "actions"))
        return int(self.q[f"w{len(self.q) // 2 - 1}"].shape[1])

    def _epsilon(self, phase: str) -> float:
        if self.q is None or phase == "heatup":
            return 1.0
        if phase == "train":
            return self.cfg.epsilon(self.env_steps)
        if phase == "evaluate":
            return self.cfg.eval_e
        return 0.0  # a trial outside an experiment: greedy


# --- learning (the learner service; JAX) -----------------------------------------------------------------


class DQNLearner(OffPolicyLearner):
    """DQN's learner, in JAX: a round of `gradient_steps` updates is one compiled call."""

    algorithm = "dqn"

    def __init__(self, cfg: DQNConfig) -> None:
        from trialog.learn import require_jax

        jax = require_jax()
        import jax.numpy as jnp
        import optax

        require_sizes(cfg, "DQNLearner")
        super().__init__(cfg)
        self.params = {
            k: jnp.asarray(v) for k, v in init_mlp(self.rng, [cfg.observation_size, *cfg.hidden, cfg.actions]).items()
        }
        self.target = self.params
        rate = cfg.learning_rate
        if cfg.learning_rate_decay_steps:  # the schedule counts gradient steps
            rate = optax.linear_schedule(cfg.learning_rate, 0.0, max(1, cfg.updates_by(cfg.learning_rate_decay_steps)))
        self.optimizer = optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(rate))
        self.opt_state = self.optimizer.init(self.params)
        self.memory = ReplayMemory(cfg.buffer_size, cfg.observation_size, n_step=cfg.n_step, gamma=cfg.gamma)

        def loss(params, target, b):
            target_q = mlp(target, b["next_obs"], jnp)
            next_action = (mlp(params, b["next_obs"], jnp) if cfg.double else target_q).argmax(axis=1)
            next_q = jnp.take_along_axis(target_q, next_action[:, None], axis=1)[:, 0]
            y = jax.lax.stop_gradient(b["rewards"] + b["discounts"] * next_q * (1.0 - b["dones"]))
            q_all = mlp(params, b["obs"], jnp)
            q = jnp.take_along_axis(q_all, b["actions"][:, None], axis=1)[:, 0]
            td = jnp.mean(optax.huber_loss(q, y) if cfg.huber else (q - y) ** 2)
            if cfg.demonstrator is None:
                return td, q.mean()
            # DQfD's large-margin loss on the demonstrator's steps of the minibatch: max over a of
            # Q(s, a) + margin (0 for the demonstrated action), less Q(s, demonstrated action).
            margins = cfg.margin * (1.0 - jax.nn.one_hot(b["actions"], cfg.actions))
            above = (q_all + margins).max(axis=1) - q
            demonstrated = b["demonstrated"]
            supervised = (above * demonstrated).sum() / jnp.maximum(demonstrated.sum(), 1.0)
            return td + cfg.demonstration_weight * supervised, q.mean()

        def step(carry, batch):
            params, opt_state, target, done = carry  # done: gradient steps before this one, over the run
            refresh = done % max(1, cfg.target_update_interval) == 0
            target = jax.tree_util.tree_map(
                lambda p, t: jnp.where(refresh, cfg.tau * p + (1.0 - cfg.tau) * t, t), params, target
            )
            (value, q_mean), grads = jax.value_and_grad(loss, has_aux=True)(params, target, batch)
            updates, opt_state = self.optimizer.update(grads, opt_state)
            return (optax.apply_updates(params, updates), opt_state, target, done + 1), (value, q_mean)

        # One compiled call per round: a scan over its `gradient_steps` minibatches.
        self._round = jax.jit(lambda carry, batches: jax.lax.scan(step, carry, batches))

    def train_round(self) -> float:
        """`gradient_steps` updates, the target network refreshed every `target_update_interval`;
        returns the mean loss."""
        batches = self.sample_round()
        (self.params, self.opt_state, self.target, _), (losses, q_means) = self._round(
            (self.params, self.opt_state, self.target, self.updates), batches
        )
        self.rounds += 1
        self.updates += self.cfg.gradient_steps
        self.round_scalars = {"loss": float(losses.mean()), "q_mean": float(q_means.mean())}
        return self.round_scalars["loss"]

    def policy_weights(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in self.params.items()}

    # What a version carries: the policy's weights, and what resuming needs (target, optimizer).
    def tensors(self) -> dict[str, np.ndarray]:
        import jax

        opt_leaves = jax.tree_util.tree_leaves(self.opt_state)
        return {
            **prefixed("q", self.params),
            **prefixed("target", self.target),
            **{f"opt/{i}": np.asarray(v) for i, v in enumerate(opt_leaves)},
        }

    def restore(self, tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        import jax
        import jax.numpy as jnp

        self.params = {k: jnp.asarray(v) for k, v in unprefixed("q", tensors).items()}
        self.target = {k: jnp.asarray(v) for k, v in unprefixed("target", tensors).items()}
        leaves, treedef = jax.tree_util.tree_flatten(self.optimizer.init(self.params))
        self.opt_state = jax.tree_util.tree_unflatten(
            treedef, [jnp.asarray(tensors[f"opt/{i}"]) for i in range(len(leaves))]
        )
        self.restore_counters(meta)
