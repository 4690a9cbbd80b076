"""The conformance suite: it plays orchestrator and environment for the trials itself,
injects rewards, messages, duplicates, probes and a SIGKILL between ticks, then has
:mod:`~trialog.tools.conformance.checks` judge the log; :func:`run_conformance` sets it up
on a fresh topic prefix for a command under test."""

from __future__ import annotations

import asyncio
import shlex
import sys
import tempfile
import uuid
from pathlib import Path

import orjson

from trialog.bus.base import Bus, Record
from trialog.environment import RewardOut, Step
from trialog.errors import TrialogError
from trialog.protocol.events import (
    HEADER_RECEIVER,
    HEADER_SENDER,
    HEADER_TICK,
    Message,
    Observation,
    Reward,
    TrialEnded,
    TrialPending,
)
from trialog.protocol.inbox import PROBE
from trialog.protocol.rewards import reward_bounds_problem
from trialog.protocol.topics import EVENTS
from trialog.protocol.trial import class_schemas, trial_info
from trialog.runtime.step_rewards import rewards_of, split_carried
from trialog.settings import Settings
from trialog.spec import Spec, load_entry, load_spec
from trialog.tools.conformance.checks import CHECKS, Check, check_answers, check_probes, check_seats
from trialog.tools.conformance.harness import give_key, keyless_env, own_topics, run_checks
from trialog.tools.conformance.trial import (
    RESTART_TIMEOUT_S,
    TICKS,
    Outcome,
    ServiceUnderTest,
    TrialLog,
    probe_answer,
    resolve_trial,
)
from trialog.trust.join_tokens import mint_join_token
from trialog.trust.keys import actor_key_id


class Suite:
    def __init__(self, bus: Bus, spec: Spec, implementation: str, make_service, *, trials: int, seed: int):
        """``make_service(extra_env)`` builds the command under test: once for an
        implementation, once per seat (with its join token) for a client implementation."""
        self.bus, self.spec, self.implementation, self.make_service = bus, spec, implementation, make_service
        self.trials, self.seed = trials, seed
        self.run_id = uuid.uuid4().hex[:8]
        self.client = spec.actors[implementation].client
        self.service: ServiceUnderTest | None = None

    # --- one trial, the suite playing orchestrator and environment ------------------------------
    async def play(self, n: int, *, battery: bool) -> Outcome:
        trial_id = f"conformance-{self.run_id}-{n}"
        started = resolve_trial(self.spec, self.implementation, trial_id, self.seed + n, TICKS)
        log = TrialLog(self.bus, trial_id)
        await log.start()
        schemas = class_schemas(self.bus.store, started)
        actor_class = {a.name: a.actor_class for a in started.actors}
        # The environment's code comes from the operator's spec file, as in every service (I-9).
        env = load_entry(self.spec.environments[started.environment].entry, what=f"environment {started.environment}")(
            trial_info(started)
        )
        out = Outcome(started, log, {}, set(), services=[self.service] if self.service else [])
        timeout = started.response_timeout_ms / 1000
        if self.client:
            await self._seat(out)
        await self.bus.publish(EVENTS, started)
        observations = env.start()
        tick, done = 0, False
        carried: dict[str, float] = {}  # the environment's rewards of the tick before, riding on the observations
        while True:
            if battery:
                await self._inject(out, tick)
            final = done or tick >= TICKS - 1
            records = []
            for actor in sorted(actor_class):
                payload = schemas[actor_class[actor]].observation.encode(observations[actor])
                reward = carried.get(actor)
                obs = Observation(trial_id, tick=tick, actor=actor, payload=payload, final=final, reward=reward)
                records.append(self.bus.to_record(EVENTS, obs))
            await self.bus.send_many(records)
            if battery and tick == 4:  # byte-identical repeats, headers included
                await self.bus.send_many(records)
                out.duplicated_ticks.add(tick)
            if final:
                out.final |= {(tick, actor) for actor in actor_class}
                break
            wait = RESTART_TIMEOUT_S if tick == out.restart_tick else timeout + 2
            actions = await log.wait_for(lambda tick=tick: self._actions_complete(log, tick, actor_class), wait)
            if not actions:
                silent = ", ".join(a for a in sorted(actor_class) if a not in self._actions_at(log, tick))
                out.missing.append(f"tick {tick}: no action from {silent} within {wait:.0f} s")
                actions = self._actions_at(log, tick)
            values = {}
            for actor in actor_class:
                record = actions.get(actor) if isinstance(actions, dict) else None
                cls = schemas[actor_class[actor]]
                try:
                    values[actor] = (
                        self.bus.store.decode(self.bus.codec.decode(record.value, "action").payload, cls.action)
                        if record
                        else cls.default_action
                    )
                except Exception:  # judged by the exactly-once check; play on with the default
                    values[actor] = cls.default_action
            step: Step = env.update(values)
            rewards = [(r.receiver, r.value) for r in rewards_of(step.rewards)]
            # Carried as Trialog's environments carry them (only those that count: the suite writes
            # bad ones too), but every third tick's as records, as an environment in another
            # language may write them: an actor takes both alike.
            riding = split_carried([RewardOut(r, v) for r, v in rewards], actor_class)[0] if tick % 3 != 2 else {}
            carried = {
                r: float(o.value) for r, o in riding.items() if reward_bounds_problem(float(o.value), 1.0) is None
            }
            await self.bus.publish_all(
                EVENTS,
                [
                    Reward(trial_id, tick=tick, receiver=r, value=float(v), sender="env")
                    for r, v in rewards
                    if r not in carried
                ],
            )
            observations = step.observations
            done = step.done or all(step.terminated.get(a) or step.truncated.get(a) for a in actor_class)
            tick += 1
        await self.bus.publish(
            EVENTS, TrialEnded(trial_id, tick=tick, reason="max_ticks" if not done else "environment")
        )
        env.end()
        await asyncio.sleep(2.0)  # late or repeated answers would land now
        if self.client:
            for service in out.services:
                service.stop()
        for r in log.of_kind("observation"):
            key = (int(r.header(HEADER_TICK) or -1), r.header(HEADER_RECEIVER) or "")
            if key not in out.final:
                out.observed[key] = r
        await log.stop()
        return out

    def _actions_at(self, log: TrialLog, tick: int) -> dict[str, Record]:
        return {r.header(HEADER_SENDER): r for r in log.of_kind("action") if r.header(HEADER_TICK) == str(tick)}

    def _actions_complete(self, log: TrialLog, tick: int, actors) -> dict[str, Record] | None:
        found = self._actions_at(log, tick)
        return found if all(a in found for a in actors) else None

    async def _inject(self, out: Outcome, tick: int) -> None:
        """Between ticks of the battery trial: rewards, messages, repeats, probes, a kill."""
        t = out.started
        first, cls = t.actors[0].name, t.actors[0].actor_class
        if tick == 2:
            await self.bus.publish_all(EVENTS, [
                Reward(t.trial_id, tick=1, receiver=first, value=0.5, confidence=1.0, sender="judge"),
                Message(t.trial_id, tick=1, sender="judge", receivers=(first,), message_id="judge-1",
                        payload='{"note": "live"}'),
            ])  # fmt: skip
        elif tick == 3:
            await self.bus.publish_all(EVENTS, [
                Reward(t.trial_id, tick=0, receiver="*", value=-2.0, confidence=0.5, sender="critic"),  # retroactive
                Reward(t.trial_id, tick=2, receiver=f"{cls}.*", value=1.25, sender="coach"),
                Message(t.trial_id, tick=2, sender="coach", receivers=("*",), message_id="coach-1",
                        payload='{"note": "to all"}'),
            ])  # fmt: skip
        elif tick == 4:
            repeat = Reward(t.trial_id, tick=1, receiver=first, value=0.5, confidence=1.0, sender="judge")
            await self.bus.send_many([self.bus.to_record(EVENTS, repeat)])
        elif tick in (5, 9):
            await self._probe(out, tick)
        elif tick == 7:
            # The service answered tick 6 (its actions are in the log): kill it, write the
            # next observations while it is down, restart it.
            await asyncio.sleep(0.5)
            for service in out.services:
                service.kill()
            out.restart_tick = tick
            for service in out.services:
                asyncio.get_running_loop().call_later(0.5, service.start)

    async def _probe(self, out: Outcome, tick: int) -> None:
        t = out.started
        probes = []
        for a in t.actors:
            pid = f"{tick}-{a.name}"
            probes.append(
                Message(
                    t.trial_id,
                    tick=tick - 1,
                    sender="conformance",
                    receivers=(a.name,),
                    message_id=f"probe-request-{pid}",
                    payload=orjson.dumps({PROBE: pid}).decode(),
                )
            )
        delivered = await self.bus.publish_all(EVENTS, probes)
        for a, d in zip(t.actors, delivered, strict=True):
            out.probes.append((f"{tick}-{a.name}", a.name, d.offset))
        await out.log.wait_for(
            lambda: all(probe_answer(out, pid) for pid, _, _ in out.probes),
            RESTART_TIMEOUT_S if out.restart_tick else 10,
        )

    async def _seat(self, out: Outcome) -> None:
        """A client implementation: write trial.pending, start one command per seat with its
        join token (and a holder id kept across its restart), wait for every join."""
        t = out.started
        await self.bus.publish(EVENTS, t.as_kind(TrialPending))
        for a in t.actors:
            token = mint_join_token(self.bus.trust.keyring, t.trial_id, a.name, ttl_s=600)
            service = self.make_service(
                {"TRIALOG_JOIN_TOKEN": token, "TRIALOG_HOLDER": f"conformance-{a.name}"}, a.name
            )
            service.start()
            out.services.append(service)
        names = {a.name for a in t.actors}
        await out.log.wait_for(
            lambda: names <= {r.header(HEADER_SENDER) for r in out.log.of_kind("actor.joined")}, RESTART_TIMEOUT_S
        )

    async def run(self) -> list[Check]:
        checks = {name: Check(name) for name in CHECKS}
        c = [checks[n] for n in CHECKS]
        answers, delivery, duplicates, restart, timely, seat = c
        if not self.client:
            seat.skipped = f"{self.implementation} is not a client implementation in the spec"
            self.service = self.make_service({})
            self.service.start()
        try:
            battery = await self.play(0, battery=True)
            others = await asyncio.gather(*(self.play(i, battery=False) for i in range(1, self.trials)))
        finally:
            if self.service is not None:
                self.service.stop()
        outcomes = [battery, *others]
        if self.client:
            check_seats(self.bus, outcomes, seat)
        check_answers(self.bus, outcomes, answers, duplicates, restart, timely)
        check_probes(self.bus, battery, delivery, duplicates)
        return c


async def run_conformance(
    settings: Settings, spec_file: str, implementation: str, command: str | None, *, trials: int, seed: int
) -> int:
    from trialog.bus import connect

    settings = own_topics(settings)
    bus = connect(settings)
    spec = load_spec(spec_file, bus.store)
    if implementation not in spec.actors:
        raise TrialogError(
            f"no actor implementation {implementation!r} in {spec_file}; declared: {', '.join(spec.actors)}"
        )
    impl = spec.actors[implementation]
    if command:
        argv = shlex.split(command)
    elif impl.served_here:
        argv = [
            sys.executable,
            "-m",
            "trialog.cli",
            "serve",
            "actors",
            "--implementation",
            implementation,
            "--spec",
            spec_file,
            "--health-port",
            "0",
        ]
    else:
        raise TrialogError(f"{implementation!r} is served outside Trialog: pass --command, the command that serves it")
    logs = Path(tempfile.mkdtemp(prefix="trialog-conformance-"))
    # The command gets what a deployment gives it: an actor service its own key only, a
    # seat only its join token (TRIALOG_JOIN_TOKEN, with TRIALOG_HOLDER).
    env = keyless_env(settings)
    if not impl.client:
        give_key(env, bus.trust.keyring, actor_key_id(implementation))

    def make_service(extra: dict[str, str], name: str = "service") -> ServiceUnderTest:
        return ServiceUnderTest(argv, {**env, **extra}, logs / f"{name}.log")

    print(
        f"conformance: {implementation} from {spec_file}, topics {settings.topic_prefix}*, logs in {logs}", flush=True
    )
    return await run_checks(
        bus, logs, lambda: Suite(bus, spec, implementation, make_service, trials=trials, seed=seed).run()
    )
