"""CoGrid environments on CoGrid's JAX backend, stepped in batches: one jitted, vmapped step
for every trial of a host whose actions a poll completes (``update_batch``).

Same config as the PettingZoo adapter hosting CoGrid (``env``, ``kwargs``, ``name``,
``agents``, ``view``), and the same actor-class schemas (:meth:`describe` is the adapter's),
so a spec swaps one for the other by its ``entry`` alone::

    environments:
      overcooked:
        entry: "trialog.adapters.cogrid_jax:CoGridJaxEnvironment"
        config:
          env: "cogrid.envs.registry:make"
          kwargs: {environment_id: Overcooked-CrampedRoom-V0}
          name: overcooked

``env`` must make a CoGrid environment and take ``backend="jax"``. Modular ``rewards`` and
``turn_based`` are not supported here (use the PettingZoo adapter).

**Determinism.** A trial's randomness comes from its seed alone: the key of its reset and
the stream of its steps' keys derive from the seed, and each step splits the trial's own
stream. Its state lives on the host as one NumPy vector, stacked into a batch for each call
and taken apart after, so a trial stepped alone (``update``, as recovery and
``replay --verify`` do) gets what it gets in a batch of any size.

**Compilation.** Batches are padded (with copies of their first trial, whose results are
dropped) to one of a few sizes (:data:`BATCH_SIZES`), so that each size compiles once per
process and configuration; the first step of a size costs seconds. CoGrid's backend is one
per process: a process hosting this adapter cannot also step CoGrid's numpy backend.
"""

from __future__ import annotations

import atexit
import json
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from trialog.adapters.hosting import HostConfig, _map_actors
from trialog.adapters.pettingzoo import PettingZooEnvironment
from trialog.adapters.views import view_function
from trialog.environment import ActorInfo, Environment, Step, TrialInfo
from trialog.errors import SpecError, TrialError
from trialog.spec import load_entry
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)

BATCH_SIZES = (1, 4, 16, 64, 256)  # a batch is padded to the next of these; larger ones go in chunks of the last
WARM_SIZES = (1, 16, 4, 64)  # compiled in the background when a configuration is first used, in this order
WARM_MESSAGE = "CoGrid on JAX: batch sizes compiled"  # logged once they are (the benchmark waits for it)


def padded_size(n: int, sizes: Sequence[int] = BATCH_SIZES) -> int:
    """The batch size (of ``sizes``) a batch of ``n`` trials is padded to: the smallest that
    holds it, else the largest (the batch then goes in chunks of it)."""
    return next((size for size in sorted(sizes) if size >= n), max(sizes))


class _Core:
    """One configuration's CoGrid environment in this process and its compiled functions
    (the reset, and the vmapped step per batch size)."""

    _cores: dict[str, _Core] = {}
    _lock = threading.Lock()

    @classmethod
    def of(cls, config: HostConfig) -> _Core:
        key = json.dumps([config.env, dict(config.kwargs)], sort_keys=True, default=str)
        with cls._lock:
            core = cls._cores.get(key)
            if core is None:
                core = cls._cores[key] = cls(config)
            return core

    def __init__(self, config: HostConfig) -> None:
        import jax
        from cogrid.backend import get_backend

        factory = load_entry(config.env, what="CoGrid environment")
        try:
            self.env = factory(**config.kwargs, backend="jax")
        except RuntimeError as exc:  # CoGrid's backend is one per process
            raise SpecError(f"{config.env}: cannot step CoGrid on JAX in this process: {exc}") from exc
        if get_backend() != "jax" or getattr(self.env, "_backend", None) != "jax":
            raise SpecError(f"{config.env} did not make a CoGrid environment on the JAX backend")
        self.env.reset(seed=0)  # builds CoGrid's functional reset and step
        self.possible = list(self.env.possible_agents)
        self.n_actions = [int(self.env.action_space(a).n) for a in self.possible]
        self.type_ids = dict(self.env._type_ids)  # noqa: SLF001  (the view names objects by them)
        step_fn, reset_fn = self.env.jax_step, self.env.jax_reset
        _, state, _ = reset_fn(jax.random.key(0))
        leaves, self.treedef = jax.tree.flatten(state)
        # A trial's whole state — its step-key stream, then CoGrid's state — as one int32 vector
        # (each leaf's bits as they are), so that a batch is one stack and one row per trial.
        jnp = jax.numpy
        is_key = [jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key) for leaf in leaves]
        data = [jax.random.key_data(x) if k else x for x, k in zip(leaves, is_key)]
        self.layout = [(np.dtype(x.dtype), tuple(x.shape), int(np.prod(x.shape, dtype=int))) for x in data]
        possible, treedef, layout = self.possible, self.treedef, self.layout

        def pack(stream, state) -> Any:
            parts = [jax.random.key_data(stream)]
            parts += [jax.random.key_data(x) if k else x for x, k in zip(jax.tree.leaves(state), is_key)]
            as_int = [
                x.astype(jnp.int32) if x.dtype == jnp.bool_ else jax.lax.bitcast_convert_type(x, jnp.int32)
                for x in parts
            ]
            return jnp.concatenate([x.reshape(-1) for x in as_int])

        def unpack(vector) -> tuple[Any, Any]:
            stream = jax.random.wrap_key_data(jax.lax.bitcast_convert_type(vector[:2], jnp.uint32))
            at, out = 2, []
            for (dtype, shape, size), k in zip(layout, is_key):
                x = vector[at : at + size].reshape(shape)
                at += size
                x = x != 0 if dtype == np.bool_ else jax.lax.bitcast_convert_type(x, dtype)
                out.append(jax.random.wrap_key_data(x) if k else x)
            return stream, jax.tree.unflatten(treedef, out)

        def reset(seed_words):  # (2,) uint32 -> the trial's packed state, observations
            base = jax.random.fold_in(jax.random.key(seed_words[0]), seed_words[1])
            reset_key, stream = jax.random.split(base)
            obs, state, _ = reset_fn(reset_key)
            return pack(stream, state), jnp.stack([obs[a] for a in possible])

        def step(vector, actions):  # one trial; vmapped over the batch
            stream, state = unpack(vector)
            stream, key = jax.random.split(stream)
            obs, state, rewards, terminated, truncated, _ = step_fn(
                key, state, {a: actions[i] for i, a in enumerate(possible)}
            )
            outcome = [
                jnp.stack([jnp.asarray(d[a], jnp.float32) for a in possible]) for d in (rewards, terminated, truncated)
            ]
            return pack(stream, state), jnp.stack([obs[a] for a in possible]), jnp.stack(outcome)

        self._reset = jax.jit(reset)
        self._step = jax.jit(jax.vmap(step))
        self._compile = threading.Lock()  # one trace at a time (CoGrid's tracing is not thread-safe)
        self.compiled: set[int] = set()  # batch sizes ready to step
        self._reset_ready = False
        self._asked = set(WARM_SIZES)  # batch sizes compiled or being compiled in the background
        self._todo: queue.SimpleQueue[int | None] = queue.SimpleQueue()  # sizes for the background thread
        for size in WARM_SIZES:
            self._todo.put(size)
        self._stopping = False
        self._warming = threading.Thread(target=self._warm, name="cogrid-jax-compile", daemon=True)
        self._warming.start()
        atexit.register(self._stop)  # not killed mid-compile at exit: XLA aborts the process then

    def _warm(self) -> None:
        """Compile batch sizes off the event loop (seconds each): first the usual ones, then any
        a batch asks for, while the service steps with the sizes it has (:meth:`sizes_for`)."""
        began, warm = time.monotonic(), set(WARM_SIZES)
        while (size := self._todo.get()) is not None and not self._stopping:
            try:
                self.compile(size)
            except Exception as exc:  # compiled when first needed instead, which says why it cannot
                log.warning(
                    "CoGrid on JAX: compiling a batch size failed", size=size, error=f"{type(exc).__name__}: {exc}"
                )
            warm.discard(size)
            if not warm and began:
                log.info(WARM_MESSAGE, sizes=list(WARM_SIZES), seconds=round(time.monotonic() - began, 1))
                began = 0.0

    def _stop(self) -> None:
        self._stopping = True
        self._todo.put(None)
        self._warming.join(timeout=120)

    def compile(self, size: int) -> None:
        vector, _ = self.reset(0)  # the reset first, under the lock on its own: a trial's start waits for it only
        with self._compile:
            if size in self.compiled:
                return
            _check_backend()  # CoGrid traces with whichever backend the process has now
            out = self._step(
                np.repeat(np.asarray(vector)[None], size, axis=0), np.zeros((size, len(self.possible)), np.int32)
            )
            np.asarray(out[2])
            self.compiled.add(size)

    def sizes_for(self, n: int) -> int:
        """The batch size to pad ``n`` trials to, of the sizes compiled already: the best one
        is compiled in the background meanwhile. Only the first step of all waits, for the
        smallest size (the warm-up's first)."""
        best = padded_size(n)
        if best in self.compiled:
            return best
        if not self.compiled:
            self.compile(WARM_SIZES[0])
        if best not in self._asked:
            self._asked.add(best)
            self._todo.put(best)
        return padded_size(n, tuple(self.compiled))

    def reset(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """A trial's packed state and observations (one row per agent) after its reset."""
        words = np.array([seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF], dtype=np.uint32)
        if not self._reset_ready:
            with self._compile:  # compiled once, by the first trial or the warm-up
                _check_backend()
                self._reset(words)
                self._reset_ready = True
        vector, obs = self._reset(words)
        return np.asarray(vector), np.asarray(obs)

    def step(self, vectors: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One vmapped step over a batch of a compiled size: the packed states, the
        observations (batch, agent, ...) and rewards, terminated, truncated (batch, 3, agent)."""
        if len(vectors) not in self.compiled:
            self.compile(len(vectors))
        vectors, obs, outcome = self._step(vectors, actions)
        return np.asarray(vectors), np.asarray(obs), np.asarray(outcome)

    def state(self, vector: np.ndarray) -> Any:
        """A packed state as CoGrid's EnvState of NumPy arrays (for views; keys as their data)."""
        import jax

        at, leaves = 2, []
        for dtype, shape, size in self.layout:
            x = vector[at : at + size].reshape(shape)
            leaves.append(x != 0 if dtype == np.bool_ else x.view(dtype))
            at += size
        return jax.tree.unflatten(self.treedef, leaves)


class CoGridJaxEnvironment(Environment):
    """A CoGrid environment on JAX; :meth:`update_batch` steps many trials in one vmapped call."""

    CODE_KEYS = ("env", "view")  # import paths: from the service's own spec only (I-9)

    def __init__(self, trial: TrialInfo) -> None:
        super().__init__(trial)
        self.config = _parse(trial.config)
        self.core = _Core.of(self.config)
        self.agent_of = _map_actors(self.config, self.core.possible, trial.actors)
        self.actors = trial.actor_names
        self.column = {a: self.core.possible.index(self.agent_of[a]) for a in self.actors}
        self.vector: np.ndarray | None = None  # the trial's packed state (its key stream and CoGrid's state)
        self.score = 0.0
        self.over = False

    @classmethod
    def prepare(cls, config: Mapping[str, Any]) -> None:
        """Compile the reset and the smallest batch size before the service takes trials (the
        first trials would wait for it, seconds); the other sizes go on compiling meanwhile."""
        _Core.of(_parse(config)).compile(WARM_SIZES[0])

    def start(self) -> dict[str, Any]:
        self.vector, obs = self.core.reset(self.trial.seed)
        self.score, self.over = 0.0, False
        return {a: obs[self.column[a]] for a in self.actors}

    def update(self, actions: Mapping[str, Any]) -> Step:
        return self.update_batch([self], [actions])[0]

    @classmethod
    def update_batch(cls, envs: Sequence[CoGridJaxEnvironment], actions: Sequence[Mapping[str, Any]]) -> list[Step]:
        """One vmapped step per configuration (and per :data:`BATCH_SIZES` chunk); no trial
        changes unless every one of them could be stepped."""
        if len(envs) != len(actions):
            raise ValueError(f"{len(envs)} environments but {len(actions)} sets of actions")
        native = [env._native(a) for env, a in zip(envs, actions)]  # raises for an invalid action
        by_core: dict[int, list[int]] = {}
        for i, env in enumerate(envs):
            by_core.setdefault(id(env.core), []).append(i)
        results: list[tuple | None] = [None] * len(envs)
        for indices in by_core.values():
            core = envs[indices[0]].core
            chunk = core.sizes_for(len(indices))
            for begin in range(0, len(indices), chunk):
                part = indices[begin : begin + chunk]
                rows = part + [part[0]] * (chunk - len(part))
                vectors, obs, outcome = core.step(
                    np.stack([envs[i].vector for i in rows]), np.stack([native[i] for i in rows])
                )
                for row, i in enumerate(part):
                    results[i] = (vectors[row], obs[row], outcome[row])
        return [env._commit(*result) for env, result in zip(envs, results)]

    def _native(self, actions: Mapping[str, Any]) -> np.ndarray:
        """The actions as CoGrid takes them: one int per agent, in its agents' order."""
        if self.vector is None or self.over:
            raise TrialError(f"{self.config.env}: update before start or after the end", trial_id=self.trial.trial_id)
        out = np.zeros(len(self.core.possible), dtype=np.int32)
        for actor, column in self.column.items():
            value = actions.get(actor)
            n = self.core.n_actions[column]
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 <= value < n:
                raise TrialError(
                    f"{self.config.env}: actor {actor!r} sent {value!r}, outside its action space Discrete({n})",
                    trial_id=self.trial.trial_id,
                    reason="invalid_action",
                )
            out[column] = value
        return out

    def _commit(self, vector: np.ndarray, obs: np.ndarray, outcome: np.ndarray) -> Step:
        self.vector = vector
        columns = self.column
        rewards, terminated, truncated = outcome
        reward = {a: float(rewards[c]) for a, c in columns.items()}
        self.score += sum(reward.values())
        ended = {a: bool(terminated[c]) for a, c in columns.items()}
        cut = {a: bool(truncated[c]) for a, c in columns.items()}
        self.over = any(ended.values()) or any(cut.values())  # CoGrid ends every agent's part together
        return Step(
            observations={a: obs[c] for a, c in columns.items()},
            rewards=reward,
            terminated=ended,
            truncated=cut,
            done=self.over,
        )

    def view(self) -> dict[str, Any] | None:
        if self.config.view is None or self.vector is None:
            return None
        state = self.core.state(self.vector)
        shim = SimpleNamespace(
            _env_state=state,
            _type_ids=self.core.type_ids,
            possible_agents=self.core.possible,
            cumulative_score=self.score,
        )
        return view_function(self.config.view)(shim, self.agent_of)

    @classmethod
    def describe(cls, config: Mapping[str, Any], actor_class: str) -> dict[str, Any]:
        """The PettingZoo adapter's schemas for the same config (CoGrid's spaces do not
        depend on the backend), so the two host the same actor classes."""
        _parse(config)
        return PettingZooEnvironment.describe(config, actor_class)

    @classmethod
    def default_actors(cls, config: Mapping[str, Any]) -> tuple[ActorInfo, ...]:
        _parse(config)
        return PettingZooEnvironment.default_actors(config)


def _check_backend() -> None:
    from cogrid.backend import get_backend

    if get_backend() != "jax":
        raise RuntimeError(f"CoGrid's backend in this process is now {get_backend()!r}: it cannot trace on JAX")


def _parse(config: Mapping[str, Any]) -> HostConfig:
    host = HostConfig.parse(config)
    if host.rewards is not None or host.turn_based or host.agent_classes is not None:
        raise SpecError(
            "the CoGrid JAX adapter reads env, kwargs, name, agents and view; "
            "modular rewards, agent_classes and turn_based need the PettingZoo adapter",
            path="environment_config",
        )
    return host
