"""The learner service: folds samples from the log, trains, publishes to ``models``.

One learner serves one actor implementation whose entry is a learning
:class:`~trialog.actor.Policy` (e.g. ``trialog.learn.dqn:DQNPolicy``) and trains the
model that implementation's config names. It is a consumer group
(``learner.<model>``) over ``events``: it folds each trial of the experiment's
``heatup`` or ``train`` phase as the datalog does
(:class:`~trialog.datalog.samples.TrialFold`: aggregated rewards, retroactive ones
included) and hands the transitions of the implementation's actors to the
algorithm's learner. A reward that arrives later (during the trial or after its end)
corrects the transition already in memory.

**Off-policy** learners (DQN) get each transition as soon as the log completes it
(the actor's next observation is logged), linked to the one before it of the same
actor so that n-step returns follow an actor's sequence among other trials' steps;
they train in a worker thread as samples come, as many rounds as the env steps owe
them, and never make actors wait. Were they fed whole trials at their end, training
and the data it sees would lag the env steps by a trial's length per trial at once.
**On-policy** learners (PPO) get each transition as it completes too, publish their
initial weights as version 1, and train — as soon as the records of a poll give them
a full batch of the version they published last, not at the next periodic sweep — then
publish the next one: synchronous collection by version. Which transitions a batch
uses, which are late and which are discarded is the learner's rule
(:class:`trialog.learn.ppo.PPOLearner`), the same in-process.

**Recovery (I-7).** A version on ``models`` carries, besides the weights, what
resuming needs: counters, the target network and the optimizer, and how far in
each partition the records whose transitions it counted go. The committed offset is
the start of the oldest trial still in memory, so a restarted learner restores the
last version, replays the log from there to refill its memory (without counting
those transitions again) and goes on.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trialog import model_registry
from trialog.bus.base import Record
from trialog.datalog.replay import Feeder
from trialog.datalog.samples import TrialFold
from trialog.learn import demonstrated, takes_demonstrations
from trialog.learn.curves import Curves
from trialog.learn.memory import one_step
from trialog.protocol.events import (
    HEADER_RECEIVER,
    HEADER_TICK,
    LEARN_PHASES,
    Action,
    ActorJoined,
    ActorTimeout,
    Event,
    Observation,
    Reward,
    TrialEnded,
    TrialPending,
    TrialStarted,
)
from trialog.protocol.rewards import senders_matching
from trialog.runtime.handler import Handler, safe_point
from trialog.runtime.recent import RecentlyEnded
from trialog.telemetry import metrics
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)

RECENT_TRIALS = 256  # ended trials kept to join late rewards to their transitions (each holds its fold: fewer)
ROUNDS_PER_VERSION = 1  # off-policy training rounds between two published versions (see _train)


@dataclass
class _Folding:
    fold: TrialFold
    partition: int
    start_offset: int
    actors: tuple[str, ...]  # the learner's implementation's actors in this trial
    serials: dict[str, dict[int, int]] = field(
        default_factory=dict
    )  # actor -> tick -> serial of its transition in memory
    added: int = 0  # transitions added to memory
    demonstration: bool = False  # a heatup trial of a learner that takes them: a demonstrator acted


class LearnerHandler(Handler):
    # trial.pending and actor.joined too: who holds a client seat decides which of its actions count
    # (the fold's seat rule).
    kinds = frozenset(
        {
            TrialPending.KIND,
            TrialStarted.KIND,
            ActorJoined.KIND,
            Observation.KIND,
            Action.KIND,
            ActorTimeout.KIND,
            Reward.KIND,
            TrialEnded.KIND,
        }
    )
    folds_carried_rewards = True
    batched = True  # off the tick path

    def __init__(
        self,
        implementation: str,
        policy_class: type,
        config: dict[str, Any],
        *,
        experiment: str = "",
        model_store: str = "",
        tensorboard: str = "",
        learn_from: tuple[str, ...] = (),
    ):
        self.implementation = implementation
        # The reward sources it learns from (None: all); the log and the datalog keep every one.
        self.learn_from = senders_matching(learn_from)
        self.curves = Curves(tensorboard) if tensorboard else None  # loss, value estimates, versions
        self.learner = policy_class.learner(config)
        self.on_policy = getattr(self.learner, "on_policy", False)  # Coach's two modes (trialog.learn)
        self.model = config.get("model") or implementation
        self.experiment = experiment
        self.model_store = model_store
        self.service_name = f"learner.{self.model}"
        self.trials: dict[str, _Folding] = {}  # live trials being folded
        self.recent: RecentlyEnded[_Folding] = RecentlyEnded(RECENT_TRIALS)  # ended trials, for late rewards
        self._feeder: Feeder | None = None  # reads the folded trials' observations and actions
        self.window: deque[tuple[int, int, int]] = (
            deque()
        )  # (partition, start offset, transitions) of what memory holds
        self.version = 0
        # The newest version of the model on `models`, whoever published it: a rollback or an import
        # while this learner runs takes a number, and the learner numbers its next one after it.
        self.newest = 0
        self._follower: model_registry.ModelFollower | None = None
        self._adopt: model_registry.ModelVersion | None = None  # a rollback to resume training from
        self.counted_through: dict[
            int, int
        ] = {}  # partition -> offset of the last record whose transitions were counted
        self._training: asyncio.Task | None = None
        self._closing = False  # a stopping service finishes the round it trains, not every round owed
        self.restored = asyncio.Event()
        self._restoring: asyncio.Task | None = None
        self._waiting: list[tuple[Record, Event]] = []  # read before the last version was restored
        metrics.watch_learner(self)

    # --- recovery ----------------------------------------------------------------------------
    def assigned(self, role: str, partition: int) -> None:
        if self._restoring is None:
            self._restoring = asyncio.get_running_loop().create_task(self._restore())

    async def _restore(self) -> None:
        """Before folding anything: the last version's weights and counters (what it counted
        must not count twice when the log is replayed)."""
        latest = (await model_registry.latest_versions(self.loop.bus)).get(self.model)
        if latest is not None and "imported_from" in latest.meta:
            # `trialog models import`: a policy's weights, no learner state (target, optimizer,
            # counters) to resume from. Training starts afresh, its versions numbered after it.
            self.version = latest.version
            log.warning(
                "the newest version was imported, not learned: training starts afresh, numbered after it",
                model=self.model,
                version=self.version,
            )
            latest = None
        if latest is not None:
            meta = latest.meta
            self.learner.restore(latest.tensors(), meta)
            self.version = latest.version
            self.counted_through = {int(p): int(o) for p, o in meta.get("counted_through", {}).items()}
            self._published()
            log.info(
                "learner resumed from the last version",
                model=self.model,
                version=self.version,
                env_steps=self.learner.env_steps,
            )
        elif getattr(self.learner, "publish_initial", False):
            await self._publish(loss=0.0, rounds=0)  # on-policy: actors act with version 1 before anything is learned
        self.newest = max(self.newest, self.version)
        self._follower = model_registry.ModelFollower(self.loop.bus, self._seen)
        self._follower.start()
        self.restored.set()
        waiting, self._waiting = self._waiting, []
        for record, event in waiting:
            self.handle(record, event)

    def _seen(self, v: model_registry.ModelVersion) -> None:
        """A version of the model on `models`: one this learner did not publish (a rollback, an
        import) takes its number; a rollback's weights are where training goes on from."""
        if v.model != self.model or v.version <= self.newest:
            return
        self.newest = v.version
        self._adopt = v if "rolled_back_from" in v.meta else None
        log.warning(
            "a version of the model was published beside this learner: the next is numbered after it"
            + (", trained on from its weights" if self._adopt else ""),
            model=self.model,
            version=v.version,
            rolled_back_from=v.meta.get("rolled_back_from"),
            imported_from=v.meta.get("imported_from"),
        )

    def _adopted(self) -> None:
        """Go on from a rollback's weights (and target and optimizer), keeping this learner's counters."""
        v, self._adopt = self._adopt, None
        if v is None:
            return
        try:
            self.learner.restore(v.tensors(), {**v.meta, **self.learner.metadata()})
        except (KeyError, ValueError) as exc:  # a rollback to an imported version: no learner state
            log.warning("cannot train on from the version rolled back to", version=v.version, error=str(exc))

    # --- folding -----------------------------------------------------------------------------
    def should_decode(self, record: Record, kind: str | None) -> bool:
        if kind in (TrialPending.KIND, TrialStarted.KIND) or not self.restored.is_set():
            return True
        trial_id = record.trial_id
        folding = self.trials.get(trial_id)
        if folding is not None and (kind == Observation.KIND or kind == Action.KIND):
            self._fold_in_place(record, kind, folding)  # read here, in place: the loop skips it
            return False
        # A reward may also be late, for a trial folded and ended; any other trial's (an
        # evaluation's: half a preset's steps) would be decoded only to be dropped by handle.
        return folding is not None or (kind == Reward.KIND and trial_id in self.recent)

    def _fold_in_place(self, record: Record, kind: str, folding: _Folding) -> None:
        """An observation or action of a trial being folded — two of a step's three records —
        read as a replay reads it (:class:`~trialog.datalog.replay.Feeder`): its tags checked and
        its body against its key and headers, its fields read in place, no event built; the
        fold gets what :meth:`handle` would give it. Decoded into an event and checked, a
        record cost this loop about twice its tag check; read this way, less than half. A
        record that does not count is skipped, as the loop skips it (its owner reports it)."""
        if self._feeder is None:
            self._feeder = Feeder(self.loop.bus)
        problems = folding.fold.problems
        noted = len(problems)
        h = self._feeder(folding.fold, record)
        if h is None:
            del problems[noted:]  # no note kept of it: a flood of forged records must not grow the fold
            return
        if kind == Observation.KIND:
            actor = (h.get(HEADER_RECEIVER) or b"").decode()
            if actor in folding.actors:
                self._stepped(record, folding, actor, int(h[HEADER_TICK]) - 1)

    def handle(self, record: Record, event: Event) -> None:
        if not self.restored.is_set():
            self._waiting.append((record, event))
            return
        if isinstance(event, TrialPending | TrialStarted) and event.trial_id not in self.trials:
            # From trial.pending when the trial has client seats: their joins come before its start.
            ours = tuple(a.name for a in event.actors if a.implementation == self.implementation)
            if ours and event.phase in LEARN_PHASES and (not self.experiment or event.experiment == self.experiment):
                folding = _Folding(
                    TrialFold(event.trial_id, self.loop.bus.store),
                    record.partition,
                    record.offset,
                    ours,
                    demonstration=takes_demonstrations(self.learner, event.phase),
                )
                folding.fold.add(event, record.headers)
                self.trials[event.trial_id] = folding
            return
        folding = self.trials.get(event.trial_id) or (
            self.recent.get(event.trial_id) if isinstance(event, Reward) else None
        )
        if folding is None:
            return
        folding.fold.add(event, record.headers)
        if isinstance(event, Observation) and event.actor in folding.actors:
            self._stepped(record, folding, event.actor, event.tick - 1)
        elif isinstance(event, Reward):
            self._rewarded(folding, event.tick)
        elif isinstance(event, TrialEnded):  # of a live trial: only rewards reach an ended one
            self._ended(record, self.trials.pop(event.trial_id))

    def _counts(self, record: Record) -> bool:
        """Whether transitions completed by this record count towards the env steps: not
        if a restored version counted them already (the log replayed after a restart)."""
        counted = record.offset > self.counted_through.get(record.partition, -1)
        if counted:
            self.counted_through[record.partition] = record.offset
        return counted

    def _stepped(self, record: Record, folding: _Folding, actor: str, tick: int) -> None:
        """Off-policy: the actor's observation of tick+1 completes its transition of tick."""
        serials = folding.serials.setdefault(actor, {})
        if tick < 0 or tick in serials:
            return  # the first observation, or a repeat: the transition is in memory already
        step = folding.fold.transition(tick, actor, self.learn_from)
        if step is None:
            return  # no action at tick (the actor did not answer), or the observation did not count
        serial = self.learner.add(
            one_step(*step),
            count=self._counts(record),
            follows=serials.get(tick - 1, -1),
            **demonstrated(folding.demonstration),
        )
        serials[tick] = int(serial[0])
        folding.added += 1

    def _rewarded(self, folding: _Folding, tick: int) -> None:
        """A reward for a tick whose transitions are in memory corrects them (as the fold aggregates)."""
        for actor, serials in folding.serials.items():
            serial = serials.get(tick)
            if serial is not None:
                reward = folding.fold.reward(tick, actor, self.learn_from)
                self.learner.set_rewards(np.array([serial]), np.array([reward], np.float32))

    def _ended(self, record: Record, folding: _Folding) -> None:
        self.window.append((folding.partition, folding.start_offset, folding.added))
        capacity = getattr(getattr(self.learner, "memory", None), "capacity", 0)
        while capacity and sum(n for _, _, n in self.window) - self.window[0][2] >= capacity:
            self.window.popleft()  # overwritten in memory: the log before it is no longer needed
        self.recent.add(folding.fold.trial_id, folding)

    # --- training ------------------------------------------------------------------------------
    @property
    def discarded(self) -> int:
        """Transitions an on-policy learner threw away (acted by another version)."""
        return int(getattr(self.learner, "discarded", 0))

    def settled_steps(self) -> int:
        """The env steps taken in when no round is owed nor training (its last version published
        before the task ended), else -1: what `trialog train` waits for before an evaluation."""
        training = self._training is not None and not self._training.done()
        if not self.restored.is_set() or training or self.learner.rounds_due():
            return -1
        return int(self.learner.env_steps)

    def polled(self) -> None:
        # On-policy: the actors act with a version whose batch is full; the sooner the next one, the fewer late.
        if self.on_policy:
            self.periodic(0.0)

    def periodic(self, now: float) -> None:
        if not self.restored.is_set() or (self._training is not None and not self._training.done()):
            return
        if self.learner.rounds_due():
            self._training = asyncio.get_running_loop().create_task(self._train())

    async def _train(self) -> None:
        # Round after round while rounds are owed: one started only at the loop's next periodic
        # sweep (every 0.2 s) capped an off-policy learner at five rounds a second, whatever a
        # round took (a DQN round of the CartPole preset: 0.07-0.09 s) — it fell behind the
        # actors through every stretch of training and an evaluation waited seconds for it.
        while True:
            self._adopted()
            # From now on an on-policy learner keeps only what the version being made will act.
            self.version += 1
            rounds, loss = 0, 0.0
            # An off-policy learner publishes after each round, as in-process the next step acts with
            # the latest weights: waiting until no round is owed let a learner slower than its
            # samples (a round of a 256x256 DQN takes a second here) publish a dozen versions in
            # 50,000 steps, the actors acting meanwhile with a version an evaluation old.
            while self.learner.rounds_due() and (self.on_policy or rounds < ROUNDS_PER_VERSION):
                loss = await asyncio.to_thread(self.learner.train_round)
                rounds += 1
            await self._publish(loss, rounds, number=self.version)
            if self.on_policy or self._closing or not self.learner.rounds_due():
                return

    async def _publish(self, loss: float, rounds: int, number: int | None = None) -> None:
        # Never a number the model has: a version published beside this learner meanwhile came first.
        self.version = max(number or self.version + 1, self.newest + 1)
        self.newest = self.version
        meta = {
            **self.learner.metadata(),
            "counted_through": {str(p): o for p, o in self.counted_through.items()},
            "discarded": self.discarded,
            "loss": loss,
        }
        version = await asyncio.to_thread(
            model_registry.make_version,
            self.model,
            self.version,
            self.learner.algorithm,
            self.learner.tensors(),
            meta,
            store=self.model_store,
        )
        await model_registry.publish(self.loop.bus, version)
        self._published()
        log.info(
            "model version published",
            model=self.model,
            version=self.version,
            rounds=rounds,
            env_steps=self.learner.env_steps,
            loss=round(loss, 4),
            discarded=self.discarded,
            late=getattr(self.learner, "late", 0),
            bytes=version.size,
            inline=version.weights is not None,
        )
        if self.curves is not None:
            self.curves.published(self.learner, self.version, self.discarded)

    def _published(self) -> None:
        """Tell the learner which version the actors act with from now on (on-policy learners sort
        transitions by it)."""
        if hasattr(self.learner, "published"):
            self.learner.published(self.version)

    def safe_offset(self, role: str, partition: int) -> int | None:
        # Also the records waiting for the restore, and the ended trials whose transitions memory still holds.
        waiting = (r.offset for r, _ in self._waiting if r.partition == partition)
        held = (start for p, start, _ in self.window if p == partition)
        return safe_point(partition, self.trials.values(), waiting, held)

    def revoked(self, role: str, partition: int) -> None:
        for tid in [t for t, f in self.trials.items() if f.partition == partition]:
            del self.trials[tid]

    async def close(self) -> None:
        self._closing = True
        if self._follower is not None:
            await self._follower.stop()
        if self._training is not None:
            await asyncio.gather(self._training, return_exceptions=True)
        if self.curves is not None:
            self.curves.close()
