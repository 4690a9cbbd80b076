"""PPO (Schulman et al. 2017) through Trialog's log, in one file, CleanRL style.

On-policy, collected synchronously by version (Coach's SYNC mode, RLlib's synchronous
sampling): the learner publishes version 1 (its initial weights) at once; actors switch
to each version at a tick boundary, as soon as they load it; the learner gets every
transition as the log completes it (linked to the same actor's previous one, whatever
trial it belongs to) and trains once it holds ``rollout_steps`` transitions acted by the
version it published last — all of them, cut where the version changed (the cut
bootstraps from V(next observation), as a rollout fragment does) — then publishes the
next version. Transitions of the version before that arrive late (acted while the
learner trained and the actors had not yet loaded the new version: through the log,
tens of milliseconds) join the next batch with a V-trace-style correction: their
probability ratio is taken against the version that acted, whose weights the learner
keeps, and their advantage trace is cut by the truncated ratio of the current policy to
it (``late_versions``, 0 to discard them). Anything older is discarded and counted.
Actors sample from the policy with draws seeded by (trial seed, actor, tick);
``evaluate`` trials act greedily.

Read top to bottom: config, policy (NumPy), learner (JAX). ``trialog train
presets/ppo_cartpole.py --in-process`` drives the same two classes in one process
(:mod:`trialog.learn.in_process`).
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trialog.actor import DecideRequest, Policy
from trialog.errors import TrialogError
from trialog.learn import config_of, sampled_actions
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
    anneal_steps: int = 0  # the rate decays linearly to 0 over this many env steps (CleanRL's anneal_lr); 0: constant
    rollout_steps: int = 512  # transitions acted by one version per update (all of them are used: at least this many)
    late_versions: int = 1  # versions before the current one whose late transitions are used, corrected (0: none)
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
        evaluated = np.array([r.trial.phase == "evaluate" and self.pi is not None for r in requests], bool)
        actions = probabilities.argmax(axis=1)  # evaluation: the likeliest action
        if not evaluated.all():
            drawing = [r for r, e in zip(requests, evaluated) if not e]
            actions[~evaluated] = sampled_actions(drawing, probabilities[~evaluated])
        return [int(a) for a in actions]


# --- learning -----------------------------------------------------------------------------------------------


class HeldBack:
    """What the learner service trims its window of ended trials by (``learner.memory.capacity``,
    as for an off-policy learner's replay memory): how many of the newest transitions a restart
    still needs. The service commits the start of the oldest trial it keeps, so that a restarted
    learner, resuming from its last version, reads them again from the log."""

    def __init__(self, learner: PPOLearner) -> None:
        self.learner = learner

    @property
    def capacity(self) -> int:
        return max(1, self.learner.held_back())


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
        # Adam, its rate applied in the update (it may decay with the env steps: anneal_steps).
        self.optimizer = optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.scale_by_adam(eps=1e-5))
        self.opt_state = self.optimizer.init(self.params)
        self.lock = threading.Lock()
        # What has come since the last batch was taken: chunks of consecutive serials (each a
        # Transitions, its first serial, the serial its first transition follows, whether it counts).
        self.pending: list[tuple[Transitions, int, int, bool]] = []
        self.added = 0  # transitions ever added: the next one's serial
        self.version = 0  # the version actors act with: the last one published
        self.closed = 0  # the last version whose batch was taken (its later transitions are late)
        self.current = 0  # pending transitions of `version`, while it is open
        self.acted: dict[int, dict[str, np.ndarray]] = {}  # version -> its policy weights (for late transitions)
        self.env_steps = 0
        self.discarded = 0  # transitions thrown away: acted by a version too old (or by none)
        self.late = 0  # transitions of the version before the current one, used with the correction
        self.rounds = 0
        self.updates = 0
        self.round_scalars: dict[str, float] = {}  # the last update's means, for the curves
        # What a restart needs (HeldBack): the transitions from `needed_from` on (not in a batch
        # whose version is published), and each one's sequence from its start, the first serial of
        # a sequence kept by its last one.
        self.needed_from = 0
        self.taken_to: int | None = None  # the end of the batch taken, until its version is published
        self.firsts: dict[int, int] = {}  # serial of a sequence's last transition -> of its first
        self.memory = HeldBack(self)

        def loss(params, b):
            m = b["mask"]  # 0 for the padding that makes every minibatch one compiled shape
            n = jnp.maximum(m.sum(), 1.0)
            logits = mlp(params["pi"], b["obs"], jnp)
            logp_all = jax.nn.log_softmax(logits)
            logp = jnp.take_along_axis(logp_all, b["actions"][:, None], axis=1)[:, 0]
            ratio = jnp.exp(logp - b["logp"])  # against the version that acted
            mean = (b["adv"] * m).sum() / n
            adv = (b["adv"] - mean) / (jnp.sqrt((((b["adv"] - mean) ** 2) * m).sum() / n) + 1e-8)
            clipped = jnp.clip(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)
            pg = (jnp.maximum(-adv * ratio, -adv * clipped) * m).sum() / n
            value = mlp(params["v"], b["obs"], jnp)[:, 0]
            v_loss = 0.5 * (((value - b["returns"]) ** 2) * m).sum() / n
            entropy = (-(jnp.exp(logp_all) * logp_all).sum(axis=1) * m).sum() / n
            parts = {"policy_loss": pg, "value_loss": v_loss, "entropy": entropy, "value_mean": (value * m).sum() / n}
            return pg - cfg.ent_coef * entropy + cfg.vf_coef * v_loss, parts

        def step(carry, batch, rate):
            params, opt_state = carry
            (value, parts), grads = jax.value_and_grad(loss, has_aux=True)(params, batch)
            updates, new_state = self.optimizer.update(grads, opt_state, params)
            updates = jax.tree_util.tree_map(lambda u: -rate * u, updates)
            stepped = (optax.apply_updates(params, updates), new_state)
            # An empty minibatch (padding only) takes no step: Adam's moments would move all the same.
            carry = jax.tree_util.tree_map(lambda a, b: jnp.where(batch["mask"].sum() > 0, a, b), stepped, carry)
            return carry, (value, parts)

        self._update = jax.jit(
            lambda params, opt_state, batches, rate: jax.lax.scan(
                lambda carry, batch: step(carry, batch, rate), (params, opt_state), batches
            )
        )
        # Minibatches of one size (CleanRL's: the rollout over the minibatches), as many as the batch
        # fills, in one compiled shape (room for twice the rollout per epoch) — compiled now, not in
        # the first round. Every transition is used.
        self.minibatch = -(-cfg.rollout_steps // cfg.minibatches)
        self.slots = 2 * cfg.minibatches  # minibatches per epoch in the compiled shape
        empty = {"obs": np.zeros((0, cfg.observation_size), np.float32), "actions": np.zeros(0, np.int32),
                 **{k: np.zeros(0, np.float32) for k in ("logp", "adv", "returns")}}  # fmt: skip
        rows = np.zeros((cfg.update_epochs * self.slots, self.minibatch), np.int64)
        self._update(self.params, self.opt_state, self._padded(empty, rows), np.float32(cfg.learning_rate))

    # --- what comes in ------------------------------------------------------------------------------
    takes_demonstrations = False  # on-policy: it learns from its own version's actions only

    def add(self, t: Transitions, *, count: bool = True, follows: int = -1, demonstration: bool = False) -> np.ndarray:
        """Transitions as the log completes them; returns their serials (for late rewards, and
        for the next one to say what it ``follows``: the same actor's previous transition).
        Which ones the next batch uses is decided when it is taken: those of another version are
        then discarded and counted (unless ``count`` is false: a restarted learner replaying
        what it counted before)."""
        if demonstration:
            raise TrialogError("PPO learns from its own actions: it takes no demonstrations")
        with self.lock:
            serials = self.added + np.arange(len(t), dtype=np.int64)
            self.pending.append((t, self.added, follows, count))
            if len(t):
                first = self.firsts.pop(follows, follows) if follows >= 0 else self.added
                self.firsts[self.added + len(t) - 1] = first
            self.added += len(t)
            self.env_steps += len(t) if count else 0
            if self.version > self.closed:
                self.current += int((t.versions == self.version).sum())
        return serials

    def _usable(self, versions: np.ndarray, current: int, acted: Mapping[int, Any]) -> np.ndarray:
        """The current version's transitions, and late ones of the ``late_versions`` before it whose
        weights are kept."""
        late = np.isin(versions, [v for v in acted if current - self.cfg.late_versions <= v < current])
        return (versions == current) | late

    def set_rewards(self, serials: np.ndarray, rewards: np.ndarray) -> None:
        """A reward corrected later (a retroactive one) for a transition not yet trained on."""
        with self.lock:
            starts = [p[1] for p in self.pending]
            for serial, reward in zip(np.asarray(serials).tolist(), np.asarray(rewards).tolist()):
                i = bisect.bisect_right(starts, serial) - 1
                if i >= 0 and serial - starts[i] < len(self.pending[i][0]):
                    self.pending[i][0].rewards[serial - starts[i]] = reward

    def held_back(self) -> int:
        """How many of the newest transitions a restart still needs: those not in the batch of a
        published version (the next batches' and the discarded ones', which the next batch takes),
        with the whole of each one's sequence — an actor's steps in one trial, reaching back to
        the trial's start, whose record a restarted learner must read again to fold them. Counted
        from the first transition of the oldest such sequence: the learner service keeps every
        ended trial with a transition among them (they end after it; see HeldBack)."""
        with self.lock:
            first = min((f for last, f in self.firsts.items() if last >= self.needed_from), default=self.added)
            # A sequence that left no transition to keep for long is not coming back: forget it.
            for last in [s for s in self.firsts if s < self.needed_from - 64 * self.cfg.rollout_steps]:
                del self.firsts[last]
            return self.added - min(first, self.needed_from)

    def published(self, version: int) -> None:
        """Actors act with ``version`` from now on (the drivers call this as they publish it)."""
        with self.lock:
            if self.taken_to is not None:  # the batch taken is in this version: a restart resumes after it
                self.needed_from, self.taken_to = self.taken_to, None
            self.version = version
            self.acted[version] = self.policy_weights()
            for old in [v for v in self.acted if v < version - self.cfg.late_versions]:
                del self.acted[old]
            self.current = sum(int((p[0].versions == version).sum()) for p in self.pending)

    def rounds_due(self) -> int:
        return int(self.version > self.closed and self.current >= self.cfg.rollout_steps)

    # --- training -----------------------------------------------------------------------------------
    def train_round(self) -> float:
        with self.lock:
            pending, self.pending = self.pending, []
            version, self.closed, self.current = self.version, self.version, 0
            self.taken_to = self.added
            acted = dict(self.acted)
        batch = self._batch(pending, version, acted) if pending else None
        n, cfg = (len(batch["obs"]) if batch else 0), self.cfg
        if n == 0:
            return 0.0
        # Every transition once per epoch: k = ceil(n / minibatch) minibatches, the padding (masked)
        # spread over them, then empty ones up to the compiled count (skipped: no step).
        k = -(-n // self.minibatch)
        slots = max(self.slots, -(-k // self.slots) * self.slots)
        order = []
        for _ in range(cfg.update_epochs):
            rows = np.pad(self.rng.permutation(n), (0, k * self.minibatch - n), constant_values=n)
            order += [rows.reshape(self.minibatch, k).T, np.full((slots - k, self.minibatch), n)]
        minibatches = self._padded(batch, np.concatenate(order))
        rate = np.float32(self.learning_rate())
        # In calls of the one compiled shape (a scan is sequential: the same steps in the same order).
        # A shape per batch size recompiled for every larger batch through the log, where late
        # transitions make batches of 256-1,500: nine tenths of the training thread's time in a
        # profile of a 30,000-step run went to XLA's compiler.
        per_call, outputs = cfg.update_epochs * self.slots, []
        for at in range(0, len(minibatches["mask"]), per_call):
            chunk = {key: v[at : at + per_call] for key, v in minibatches.items()}
            (self.params, self.opt_state), out = self._update(self.params, self.opt_state, chunk, rate)
            outputs.append(out)
        losses = np.concatenate([np.asarray(loss) for loss, _ in outputs])
        parts = {key: np.concatenate([np.asarray(p[key]) for _, p in outputs]) for key in outputs[0][1]}
        took = minibatches["mask"].sum(axis=1) > 0
        self.rounds += 1
        self.updates += int(took.sum())
        self.round_scalars = {"loss": float(np.asarray(losses)[took].mean()), "batch": float(n),
                              "learning_rate": float(rate),
                              **{key: float(np.asarray(v)[took].mean()) for key, v in parts.items()}}  # fmt: skip
        return self.round_scalars["loss"]

    def learning_rate(self) -> float:
        """The rate of the next round: constant, or decaying linearly to 0 over ``anneal_steps`` env steps."""
        if not self.cfg.anneal_steps:
            return self.cfg.learning_rate
        return self.cfg.learning_rate * max(0.0, 1.0 - self.env_steps / self.cfg.anneal_steps)

    @staticmethod
    def _padded(batch: Mapping[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
        """The minibatches of ``rows`` (an array of indices of any shape); an index past the batch's
        end is padding (mask 0)."""
        n = len(batch["obs"])
        real = rows < n
        safe = np.where(real, rows, 0)
        out = {key: v[safe] if n else np.zeros((*rows.shape, *v.shape[1:]), v.dtype) for key, v in batch.items()}
        return {**out, "mask": real.astype(np.float32)}

    def _batch(self, pending: list[tuple[Transitions, int, int, bool]], version: int, acted: Mapping[int, Any]):
        """The batch of ``version``: its transitions and the usable late ones, with advantages
        (GAE along each actor's sequence; a sequence cut where its next transition is not in the
        batch bootstraps from V(next observation)) and value targets."""
        cfg = self.cfg
        t = Transitions.concat([p[0] for p in pending])
        base, lengths = pending[0][1], np.array([len(p[0]) for p in pending])
        # The transition continuing each one (an index, -1: none here): the next in its chunk unless
        # it ends, and a chunk's first continues the transition it follows. Serials run on across chunks.
        last_of_chunk = np.zeros(len(t), bool)
        last_of_chunk[np.cumsum(lengths)[lengths > 0] - 1] = True
        nxt = np.where((t.ends == 0) & ~last_of_chunk, np.arange(1, len(t) + 1), -1)
        firsts = np.cumsum(lengths) - lengths
        follows = np.array([p[2] for p in pending]) - base
        linked = (lengths > 0) & (follows >= 0) & (follows < len(t))
        nxt[follows[linked]] = firsts[linked]
        usable = self._usable(t.versions, version, acted)
        counts = np.repeat(np.array([p[3] for p in pending], bool), lengths)
        keep = np.flatnonzero(usable)
        with self.lock:
            self.discarded += int((~usable & counts).sum())
            self.late += int((t.versions[keep] != version).sum())
        new_index = np.full(len(t) + 1, -1, np.int64)
        new_index[keep] = np.arange(len(keep))
        nxt = new_index[nxt[keep]]  # -1 stays -1 (new_index[-1] is the spare slot)
        obs, actions = t.observations[keep], t.actions[keep].astype(np.int32)
        rewards, dones, versions = t.rewards[keep], t.dones[keep], t.versions[keep]
        logp_all, both = self._forward(self.params, np.concatenate([obs, t.next_observations[keep]]))
        logp_all, values, next_values = logp_all[: len(keep)], both[: len(keep)], both[len(keep) :]
        logp = logp_all[np.arange(len(keep)), actions]
        behaviour = logp.copy()  # the current weights are the version's own: ratio 1
        for v in set(versions.tolist()) - {version}:
            rows = versions == v
            theirs, _ = self._forward({"pi": acted[v], "v": self.params["v"]}, obs[rows])
            behaviour[rows] = theirs[np.arange(rows.sum()), actions[rows]]
        # V-trace-style traces: c = λ·min(1, π/μ) for the transitions after the first (1 for the
        # version's own); the first action's deviation is the clipped ratio's business.
        trace = cfg.gae_lambda * np.minimum(1.0, np.exp(logp - behaviour))
        nonterminal = 1.0 - dones
        delta = rewards + cfg.gamma * next_values * nonterminal - values
        carry = (cfg.gamma * nonterminal * np.where(nxt >= 0, trace[nxt], 0.0)).tolist()
        adv, after, deltas = [0.0] * len(keep), nxt.tolist(), delta.tolist()
        for k in range(len(keep) - 1, -1, -1):  # a transition's successor always came after it
            j = after[k]
            adv[k] = deltas[k] + (carry[k] * adv[j] if j >= 0 else 0.0)
        adv = np.array(adv, np.float32)
        return {"obs": obs, "actions": actions, "logp": behaviour.astype(np.float32), "adv": adv,
                "returns": (adv + values).astype(np.float32)}  # fmt: skip

    def _forward(self, params, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log-probabilities and values in NumPy (batches of any size: no recompilation)."""
        pi = {k: np.asarray(v) for k, v in params["pi"].items()}
        v = {k: np.asarray(x) for k, x in params["v"].items()}
        logits = mlp(pi, obs)
        logits = logits - logits.max(axis=1, keepdims=True)
        return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True)), mlp(v, obs)[:, 0]

    # --- versions -----------------------------------------------------------------------------------
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
        with self.lock:
            owed = max(0, self.cfg.rollout_steps - self.current)
        return {
            "env_steps": self.env_steps,
            "rounds": self.rounds,
            "updates": self.updates,
            "discarded": self.discarded,
            "late": self.late,
            # Until the env steps reach it, no batch is due: this version is as trained as it gets.
            "next_round_at": self.env_steps + owed,
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
        self.env_steps, self.rounds, self.updates, self.discarded, self.late = (
            int(meta.get(k, 0)) for k in ("env_steps", "rounds", "updates", "discarded", "late")
        )
