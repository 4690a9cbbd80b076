"""TD3 (Fujimoto et al. 2018) through Trialog's log, in one file, for continuous (Box) actions.

Read top to bottom: the config (also the spec's actor config and the preset's ``agent``
overrides), the policy the actor service runs and the learner the learner service runs —
both in plain NumPy: the learner's gradients are written out by hand for the one network
shape here (:mod:`trialog.learn.nets`' MLP), with Adam beside them, so TD3 needs no tensor
library at all. ``trialog train presets/td3_pendulum.py --in-process`` drives the same two
classes in one process (:mod:`trialog.learn.in_process`).

Why TD3 rather than SAC: its actor is deterministic, so acting is one forward pass and a
tanh, and learning needs no log-probabilities, entropy term or temperature to tune — the
three things that make SAC's hand-written gradients long. Its three tricks over DDPG: twin
critics (the target takes the smaller of the two), target policy smoothing (clipped noise on
the target action), delayed actor and target updates.

Actions: the actor's output is ``tanh`` in [-1, 1] per action, scaled into the Box's bounds
(``action_low``, ``action_high``; with ``observation_size`` and ``action_size`` they come from
the actor class's spaces, :mod:`trialog.learn.spaces`). The policy answers a float32 array of
the Box's shape — a ``trialog.Tensor`` on the wire. The critics and the memory see actions
in the [-1, 1] units.

How the phases act: ``heatup`` (and before any model) uniform in the bounds; ``train`` the
actor's action plus Gaussian noise (``exploration_noise`` of the half range), clipped;
``evaluate`` (and outside experiments) the actor's action.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trialog.actor import DecideRequest, Policy
from trialog.errors import TrialogError
from trialog.learn import config_of, decision_generator
from trialog.learn.memory import ReplayMemory, Transitions, flat_observation
from trialog.learn.nets import init_mlp, mlp, prefixed, unprefixed
from trialog.learn.offpolicy import OffPolicyLearner
from trialog.learn.spaces import BOX_SIZES, missing_sizes, require_sizes

NETS = ("actor", "q1", "q2")  # the trained networks; each has a target copy ("actor_target", ...)


@dataclass(frozen=True)
class TD3Config:
    model: str = "td3"  # the model's name on `models`
    # None: from the actor class's spaces (a Box), as `trialog train` and the learner service size them.
    observation_size: int | None = None
    action_size: int | None = None
    action_low: tuple[float, ...] | None = None  # one bound per action
    action_high: tuple[float, ...] | None = None
    hidden: tuple[int, ...] = (64, 64)  # actor and critics alike
    actor_learning_rate: float = 1e-3
    critic_learning_rate: float = 1e-3
    buffer_size: int = 100_000
    gamma: float = 0.99
    tau: float = 0.005  # the targets move this fraction towards the networks at each actor update
    batch_size: int = 256
    learning_starts: int = 1_000  # env steps before the first update (the heatup phase)
    train_frequency: int = 200  # env steps between two training rounds (a version after each)
    gradient_steps: int = 200  # critic updates per round: one per env step
    policy_delay: int = 2  # critic updates per actor (and target) update
    policy_noise: float = 0.2  # target policy smoothing: noise on the target action, in [-1, 1] units
    noise_clip: float = 0.5  # ... clipped to this
    exploration_noise: float = 0.1  # Gaussian noise on the action in train trials, in [-1, 1] units
    seed: int = 1  # network initialisation, minibatch sampling and target noise

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> TD3Config:
        cfg = config_of(cls, config)
        for key in ("action_low", "action_high"):
            value = getattr(cfg, key)
            if value is not None and not isinstance(value, tuple):  # one number for every action
                cfg = dataclasses.replace(cfg, **{key: (float(value),) * (cfg.action_size or 1)})
        return cfg

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The centre and the half range of the Box, per action."""
        low, high = np.asarray(self.action_low, np.float32), np.asarray(self.action_high, np.float32)
        return (high + low) / 2, (high - low) / 2


# --- acting (actor services; NumPy only) ------------------------------------------------------------


class TD3Policy(Policy):
    """Acts for every pending observation of every trial with one forward pass."""

    sizes_from_spaces = True  # observation_size, action_size and the bounds come from the class's spaces
    action_space = "Box"  # ... of a Box (trialog.learn.spaces)

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.cfg = TD3Config.of(config)
        self.actor: dict[str, np.ndarray] | None = None  # no model yet: random actions

    @classmethod
    def learner(cls, config: Mapping[str, Any]) -> TD3Learner:
        return TD3Learner(TD3Config.of(config))

    def load(self, version) -> None:
        self.actor = unprefixed("actor", version.tensors())

    def decide_batch(self, requests: Sequence[DecideRequest]) -> list[np.ndarray]:
        if self.cfg.action_low is None or self.cfg.action_high is None:
            raise TrialogError(missing_sizes("TD3Policy", "action_low", "action_high"))
        centre, half = self.cfg.bounds()
        greedy = None
        if self.actor is not None:
            greedy = np.tanh(mlp(self.actor, np.stack([flat_observation(r.observation) for r in requests])))
        actions = []
        for i, r in enumerate(requests):
            if greedy is None or r.trial.phase == "heatup":
                a = decision_generator(r).uniform(-1.0, 1.0, centre.shape)
            elif r.trial.phase == "train":
                noise = decision_generator(r).normal(0.0, self.cfg.exploration_noise, centre.shape)
                a = np.clip(greedy[i] + noise, -1.0, 1.0)
            else:  # evaluate, or a trial outside an experiment: the actor's action
                a = greedy[i]
            actions.append((centre + half * a).astype(np.float32))
        return actions


# --- the networks' gradients, by hand ------------------------------------------------------------------


def forward(params: Mapping[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """:func:`trialog.learn.nets.mlp`, keeping each layer's input for :func:`backward`."""
    inputs, layers = [], len(params) // 2
    for i in range(layers):
        inputs.append(x)
        x = x @ params[f"w{i}"] + params[f"b{i}"]
        if i < layers - 1:
            x = np.maximum(x, 0)
    return x, inputs


def backward(
    params: Mapping[str, np.ndarray], inputs: list[np.ndarray], grad: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The gradients of the parameters and of the input, given the gradient of the output."""
    grads = {}
    for i in reversed(range(len(inputs))):
        grads[f"w{i}"] = inputs[i].T @ grad
        grads[f"b{i}"] = grad.sum(axis=0)
        grad = grad @ params[f"w{i}"].T
        if i > 0:
            grad = grad * (inputs[i] > 0)  # ReLU: the input of layer i is the output of the one before
    return grads, grad


class Adam:
    """Adam (Kingma & Ba 2015) over a flat parameter dict, updated in place."""

    def __init__(self, params: Mapping[str, np.ndarray], rate: float, b1: float = 0.9, b2: float = 0.999) -> None:
        self.rate, self.b1, self.b2, self.t = rate, b1, b2, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, params: dict[str, np.ndarray], grads: Mapping[str, np.ndarray]) -> None:
        self.t += 1
        rate = self.rate * np.sqrt(1 - self.b2**self.t) / (1 - self.b1**self.t)
        for k, g in grads.items():
            m, v = self.m[k], self.v[k]
            m += (1 - self.b1) * (g - m)
            v += (1 - self.b2) * (g * g - v)
            params[k] -= (rate * m / (np.sqrt(v) + 1e-8)).astype(np.float32)


class BoxMemory(ReplayMemory):
    """The replay memory with a row of floats per action (one-step returns)."""

    def __init__(self, capacity: int, observation_size: int, action_size: int, gamma: float) -> None:
        super().__init__(capacity, observation_size, n_step=1, gamma=gamma)
        self.actions = np.zeros((capacity, action_size), np.float32)


# --- learning (the learner service; NumPy) ---------------------------------------------------------------


class TD3Learner(OffPolicyLearner):
    """TD3's learner, in NumPy: twin critics updated every step, the actor and the targets
    every `policy_delay`th."""

    algorithm = "td3"

    def __init__(self, cfg: TD3Config) -> None:
        require_sizes(cfg, "TD3Learner", BOX_SIZES)
        super().__init__(cfg)
        self.centre, self.half = cfg.bounds()
        obs, act = cfg.observation_size, cfg.action_size
        self.nets = {
            "actor": init_mlp(self.rng, [obs, *cfg.hidden, act], last_scale=0.1),
            "q1": init_mlp(self.rng, [obs + act, *cfg.hidden, 1]),
            "q2": init_mlp(self.rng, [obs + act, *cfg.hidden, 1]),
        }
        for name in NETS:
            self.nets[f"{name}_target"] = {k: v.copy() for k, v in self.nets[name].items()}
        self.optimizers = {
            name: Adam(self.nets[name], cfg.actor_learning_rate if name == "actor" else cfg.critic_learning_rate)
            for name in NETS
        }
        self.memory = BoxMemory(cfg.buffer_size, obs, act, cfg.gamma)

    def add(self, t: Transitions, *, count: bool = True, follows: int = -1, demonstration: bool = False) -> np.ndarray:
        """Store transitions, their actions in [-1, 1] units (serials: see :class:`ReplayMemory`);
        ``count=False`` refills the memory after a restart without counting them again."""
        actions = np.asarray(t.actions, np.float32).reshape(len(t), -1)
        t = dataclasses.replace(t, actions=np.clip((actions - self.centre) / self.half, -1.0, 1.0))
        return super().add(t, count=count, follows=follows, demonstration=demonstration)

    def train_round(self) -> float:
        """`gradient_steps` critic updates, the actor and the targets every `policy_delay`th;
        returns the mean critic loss."""
        batches = self.sample_round()
        losses, q_means, actor_losses = [], [], []
        for i in range(self.cfg.gradient_steps):
            loss, q_mean = self.update_critics({k: v[i] for k, v in batches.items()})
            losses.append(loss)
            q_means.append(q_mean)
            self.updates += 1
            if self.updates % self.cfg.policy_delay == 0:
                actor_losses.append(self.update_actor(batches["obs"][i]))
                self.update_targets()
        self.rounds += 1
        self.round_scalars = {"loss": float(np.mean(losses)), "q_mean": float(np.mean(q_means))}
        if actor_losses:
            self.round_scalars["actor_loss"] = float(np.mean(actor_losses))
        return self.round_scalars["loss"]

    def target_values(self, b: Mapping[str, np.ndarray]) -> np.ndarray:
        """r + γ·min(Q1', Q2')(s', smoothed π'(s')), nothing past a termination."""
        cfg, n = self.cfg, len(b["rewards"])
        noise = np.clip(self.rng.normal(0.0, cfg.policy_noise, (n, cfg.action_size)), -cfg.noise_clip, cfg.noise_clip)
        next_action = np.clip(np.tanh(mlp(self.nets["actor_target"], b["next_obs"])) + noise, -1.0, 1.0)
        x = np.concatenate([b["next_obs"], next_action.astype(np.float32)], axis=1)
        next_q = np.minimum(mlp(self.nets["q1_target"], x), mlp(self.nets["q2_target"], x))[:, 0]
        return b["rewards"] + b["discounts"] * (1.0 - b["dones"]) * next_q

    def update_critics(self, b: Mapping[str, np.ndarray]) -> tuple[float, float]:
        """One Adam step of each critic on the mean squared error to the target values."""
        y = self.target_values(b)
        x = np.concatenate([b["obs"], b["actions"]], axis=1)
        loss, q_mean = 0.0, 0.0
        for name in ("q1", "q2"):
            q, inputs = forward(self.nets[name], x)
            error = q[:, 0] - y
            grads, _ = backward(self.nets[name], inputs, (2.0 / len(y) * error)[:, None].astype(np.float32))
            self.optimizers[name].step(self.nets[name], grads)
            loss += float(np.mean(error**2)) / 2
            q_mean += float(q.mean()) / 2
        return loss, q_mean

    def update_actor(self, obs: np.ndarray) -> float:
        """One Adam step of the actor up Q1's gradient: the loss is -mean Q1(s, π(s))."""
        z, actor_inputs = forward(self.nets["actor"], obs)
        action = np.tanh(z)
        q, q_inputs = forward(self.nets["q1"], np.concatenate([obs, action], axis=1))
        _, grad_x = backward(self.nets["q1"], q_inputs, np.full_like(q, -1.0 / len(q)))
        grad_z = grad_x[:, self.cfg.observation_size :] * (1.0 - action**2)
        grads, _ = backward(self.nets["actor"], actor_inputs, grad_z)
        self.optimizers["actor"].step(self.nets["actor"], grads)
        return float(-q.mean())

    def update_targets(self) -> None:
        for name in NETS:
            target = self.nets[f"{name}_target"]
            for k, v in self.nets[name].items():
                target[k] += self.cfg.tau * (v - target[k])

    def policy_weights(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.nets["actor"].items()}

    # What a version carries: the policy's weights (`actor/`), and what resuming needs (the
    # critics, the targets, Adam's moments and step counts).
    def tensors(self) -> dict[str, np.ndarray]:
        out = {}
        for name, params in self.nets.items():
            out.update(prefixed(name, params))
        for name, opt in self.optimizers.items():
            out.update(prefixed(f"opt/{name}/m", opt.m))
            out.update(prefixed(f"opt/{name}/v", opt.v))
            out[f"opt/{name}/t"] = np.array([opt.t], np.int64)
        return out

    def restore(self, tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        for name in self.nets:
            self.nets[name] = {k: np.array(v, np.float32) for k, v in unprefixed(name, tensors).items()}
        for name, opt in self.optimizers.items():
            opt.m = {k: np.array(v, np.float32) for k, v in unprefixed(f"opt/{name}/m", tensors).items()}
            opt.v = {k: np.array(v, np.float32) for k, v in unprefixed(f"opt/{name}/v", tensors).items()}
            opt.t = int(tensors[f"opt/{name}/t"][0])
        self.restore_counters(meta)
