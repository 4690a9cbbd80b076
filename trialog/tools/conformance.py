"""``trialog conformance``: check an actor service, in any language, against the protocol.

The suite plays the other side of the log itself — it writes ``trial.started``,
steps the spec's own environment in-process and writes its observations and rewards,
then ``trial.ended`` — so it controls every tick: it injects rewards, messages,
duplicates and probes between ticks, and SIGKILLs and restarts the service under test
mid-trial. The service under test is a command (``--command``), or for a Python
implementation of the spec, ``trialog serve actors``. Every actor of the trials is
played by the implementation under test. One line per check and a summary; exit code
0 only when every check passed. docs/protocol.md ("Conformance") describes the checks
and the probe they rely on.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from trialog.bus.base import Bus, Record
from trialog.environment import Step
from trialog.errors import TrialogError
from trialog.protocol.events import (
    HEADER_KIND,
    HEADER_RECEIVER,
    HEADER_SENDER,
    HEADER_TICK,
    Action,
    ActorClassSpec,
    ActorSpec,
    Message,
    Observation,
    Reward,
    TrialEnded,
    TrialPending,
    TrialStarted,
)
from trialog.protocol.inbox import PROBE
from trialog.protocol.trial import class_schemas, reaches, trial_info
from trialog.settings import Settings
from trialog.spec import Spec, load_entry, load_spec
from trialog.protocol.topics import EVENTS
from trialog.trust import actor_key_id, mint_join_token

TICKS = 12  # per conformance trial: room for every injection below and a kill
RESTART_TIMEOUT_S = 90.0  # a killed member leaves its group after its session timeout


@dataclass
class Check:
    name: str
    problems: list[str] = field(default_factory=list)
    facts: str = ""
    skipped: str = ""

    def fail(self, problem: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(problem)

    def line(self) -> str:
        if self.skipped:
            return f"SKIP  {self.name} — {self.skipped}"
        status = "PASS" if not self.problems else "FAIL"
        detail = f" ({self.facts})" if self.facts else ""
        out = f"{status}  {self.name}{detail}"
        return out + "".join(f"\n        {p}" for p in self.problems)


CHECKS = (
    "answers each observation of its actors exactly once, with the class's action schema, tagged with its key",
    "receives live and retroactive rewards and messages, each once",
    "ignores duplicates (a repeated observation and reward change nothing)",
    "resumes after a SIGKILL without re-sending an action the log holds",
    "answers within the trial's response timeout",
    "joins as a client seat",
)


class ServiceUnderTest:
    """The command serving the implementation, in a process group of its own (so that a
    SIGKILL reaches every process of it, e.g. npm and node)."""

    def __init__(self, argv: list[str], env: dict[str, str], log_file: Path):
        self.argv, self.env, self.log_file = argv, env, log_file
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_file, "ab") as out:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()


def resolve_trial(spec: Spec, implementation: str, trial_id: str, seed: int, max_ticks: int) -> TrialStarted:
    """The spec's default trial with every actor played by ``implementation``."""
    t = spec.trial
    impl = spec.actors[implementation]
    actors = []
    for a in t.actors:
        if impl.classes and a.actor_class not in impl.classes:
            raise TrialogError(f"{implementation!r} does not play class {a.actor_class!r} of the spec's trial actor {a.name!r}")
        config = orjson.dumps({**impl.config, **a.config}).decode()
        actors.append(ActorSpec(a.name, a.actor_class, implementation, config, impl.client))
    classes = tuple(
        ActorClassSpec(c.name, c.observation_schema, c.action_schema, orjson.dumps(c.default_action).decode() if c.has_default_action else None)
        for c in spec.actor_classes.values()
    )
    env = spec.environments[t.environment]
    return TrialStarted(
        trial_id, spec=spec.name, environment=t.environment, environment_entry=env.entry,
        environment_config=orjson.dumps({**env.config, **t.environment_config}).decode(), actors=tuple(actors),
        actor_classes=classes, seed=seed, max_ticks=max_ticks, response_timeout_ms=t.response_timeout_ms,
        timeout_policy=t.timeout_policy, parameters=orjson.dumps(dict(t.parameters)).decode(),
    )  # fmt: skip


class TrialLog:
    """Every record of one trial's partition from its start, read by a background task."""

    def __init__(self, bus: Bus, trial_id: str):
        self.bus, self.trial_id = bus, trial_id
        self.partition = bus.partition_of(trial_id)
        self.records: list[Record] = []
        self.changed = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        consumer = self.bus.consumer([EVENTS], partitions=[self.partition])
        await consumer.start()
        end = (await consumer.end_offsets([(EVENTS, self.partition)]))[(EVENTS, self.partition)]
        consumer.seek(EVENTS, self.partition, end)
        self._task = asyncio.create_task(self._read(consumer))

    async def _read(self, consumer) -> None:
        try:
            while True:
                for r in await consumer.poll(timeout_ms=200):
                    if r.trial_id == self.trial_id:
                        self.records.append(r)
                        self.changed.set()
        finally:
            await consumer.stop()

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def of_kind(self, kind: str) -> list[Record]:
        return [r for r in self.records if r.header(HEADER_KIND) == kind]

    async def wait_for(self, found, timeout: float) -> Any:
        """Wait until ``found()`` returns something truthy (re-checked as records arrive)."""
        deadline = time.monotonic() + timeout
        while not (result := found()):
            left = deadline - time.monotonic()
            if left <= 0:
                return result
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), min(left, 0.5))
            except TimeoutError:
                pass
        return result


@dataclass
class Outcome:
    started: TrialStarted
    log: TrialLog
    observed: dict[tuple[int, str], Record]  # (tick, actor) -> observation record
    final: set[tuple[int, str]]
    probes: list[tuple[str, str, int]] = field(default_factory=list)  # (probe id, actor, offset of the probe)
    restart_tick: int | None = None
    duplicated_ticks: set[int] = field(default_factory=set)
    missing: list[str] = field(default_factory=list)
    services: list[ServiceUnderTest] = field(default_factory=list)  # what plays this trial


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
        env = load_entry(self.spec.environments[started.environment].entry, what=f"environment {started.environment}")(trial_info(started))
        out = Outcome(started, log, {}, set(), services=[self.service] if self.service else [])
        timeout = started.response_timeout_ms / 1000
        if self.client:
            await self._seat(out)
        await self.bus.publish(EVENTS, started)
        observations = env.start()
        tick, done = 0, False
        while True:
            if battery:
                await self._inject(out, tick)
            final = done or tick >= TICKS - 1
            records = []
            for actor in sorted(actor_class):
                payload = schemas[actor_class[actor]].observation.encode(observations[actor])
                records.append(self.bus.to_record(EVENTS, Observation(trial_id, tick=tick, actor=actor, payload=payload, final=final)))
            await self.bus.send_many(records)
            if battery and tick == 4:  # byte-identical repeats, headers included
                await self.bus.send_many(records)
                out.duplicated_ticks.add(tick)
            if final:
                out.final |= {(tick, actor) for actor in actor_class}
                break
            wait = RESTART_TIMEOUT_S if tick == out.restart_tick else timeout + 2
            actions = await log.wait_for(lambda: self._actions_complete(log, tick, actor_class), wait)
            if not actions:
                out.missing.append(f"tick {tick}: no action from {', '.join(a for a in sorted(actor_class) if a not in self._actions_at(log, tick))} within {wait:.0f} s")
                actions = self._actions_at(log, tick)
            values = {}
            for actor in actor_class:
                record = actions.get(actor) if isinstance(actions, dict) else None
                cls = schemas[actor_class[actor]]
                try:
                    values[actor] = self.bus.store.decode(self.bus.codec.decode(record.value, "action").payload, cls.action) if record else cls.default_action
                except Exception:  # judged by the exactly-once check; play on with the default
                    values[actor] = cls.default_action
            step: Step = env.update(values)
            rewards = step.rewards.items() if isinstance(step.rewards, dict) else [(r.receiver, r.value) for r in step.rewards]
            await self.bus.publish_all(EVENTS, [Reward(trial_id, tick=tick, receiver=r, value=float(v), sender="env") for r, v in rewards])
            observations = step.observations
            done = step.done or all(step.terminated.get(a) or step.truncated.get(a) for a in actor_class)
            tick += 1
        await self.bus.publish(EVENTS, TrialEnded(trial_id, tick=tick, reason="max_ticks" if not done else "environment"))
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
                Message(t.trial_id, tick=1, sender="judge", receivers=(first,), message_id="judge-1", payload='{"note": "live"}'),
            ])  # fmt: skip
        elif tick == 3:
            await self.bus.publish_all(EVENTS, [
                Reward(t.trial_id, tick=0, receiver="*", value=-2.0, confidence=0.5, sender="critic"),  # retroactive
                Reward(t.trial_id, tick=2, receiver=f"{cls}.*", value=1.25, sender="coach"),
                Message(t.trial_id, tick=2, sender="coach", receivers=("*",), message_id="coach-1", payload='{"note": "to all"}'),
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
            probes.append(Message(t.trial_id, tick=tick - 1, sender="conformance", receivers=(a.name,), message_id=f"probe-request-{pid}", payload=orjson.dumps({PROBE: pid}).decode()))
        delivered = await self.bus.publish_all(EVENTS, probes)
        for a, d in zip(t.actors, delivered, strict=True):
            out.probes.append((f"{tick}-{a.name}", a.name, d.offset))
        await out.log.wait_for(lambda: all(self._probe_answer(out, pid) for pid, _, _ in out.probes), RESTART_TIMEOUT_S if out.restart_tick else 10)

    def _probe_answer(self, out: Outcome, pid: str) -> list[Record]:
        return [r for r in out.log.of_kind("message") if r.header("id") == f"probe-{pid}"]

    async def _seat(self, out: Outcome) -> None:
        """A client implementation: write trial.pending, start one command per seat with its
        join token (and a holder id kept across its restart), wait for every join."""
        t = out.started
        await self.bus.publish(EVENTS, t.as_kind(TrialPending))
        for a in t.actors:
            token = mint_join_token(self.bus.trust.keyring, t.trial_id, a.name, ttl_s=600)
            service = self.make_service({"TRIALOG_JOIN_TOKEN": token, "TRIALOG_HOLDER": f"conformance-{a.name}"}, a.name)
            service.start()
            out.services.append(service)
        names = {a.name for a in t.actors}
        await out.log.wait_for(lambda: names <= {r.header(HEADER_SENDER) for r in out.log.of_kind("actor.joined")}, RESTART_TIMEOUT_S)

    def check_seats(self, outcomes: list[Outcome], check: Check) -> None:
        """Every seat joined with a tag of its seat key and its holder id, before it played."""
        joins = 0
        for out in outcomes:
            for a in out.started.actors:
                mine = [r for r in out.log.of_kind("actor.joined") if r.header(HEADER_SENDER) == a.name]
                if not mine:
                    check.fail(f"{out.started.trial_id}: {a.name} never joined")
                    continue
                joins += len(mine)
                for r in mine:
                    refused = self.bus.trust.check(r.key, r.headers, r.value)
                    if refused:
                        check.fail(f"{out.started.trial_id}: the join of {a.name} is refused: {refused}")
                    if r.header("holder") != f"conformance-{a.name}":
                        check.fail(f"{out.started.trial_id}: the join of {a.name} names holder {r.header('holder')!r}, not the one it was given")
                    joined = self.bus.codec.decode(r.value, "actor.joined")
                    if (joined.trial_id, joined.actor) != (out.started.trial_id, a.name):
                        check.fail(f"{out.started.trial_id}: a join whose value says {joined.actor} of {joined.trial_id}")
        check.facts = f"{joins} joins with a join token, each tagged with its seat key and holder"

    # --- the checks ---------------------------------------------------------------------------------
    def check_answers(self, outcomes: list[Outcome], check: Check, duplicates: Check, restart: Check, timely: Check) -> None:
        answered = 0
        lat: list[float] = []
        for out in outcomes:
            t = out.started
            schemas = class_schemas(self.bus.store, t)
            classes = {a.name: a.actor_class for a in t.actors}
            for problem in out.missing:
                (restart if out.restart_tick is not None and f"tick {out.restart_tick}:" in problem else check).fail(f"{t.trial_id} {problem}")
            counts = Counter()
            for r in out.log.of_kind("action"):
                tick, actor = int(r.header(HEADER_TICK) or -1), r.header(HEADER_SENDER) or ""
                counts[(tick, actor)] += 1
                if actor not in classes:
                    check.fail(f"{t.trial_id}: action from {actor!r}, not an actor of the trial")
                    continue
                if (tick, actor) in out.final:
                    check.fail(f"{t.trial_id}: action for the final observation of {actor} at tick {tick}")
                elif (tick, actor) not in out.observed:
                    check.fail(f"{t.trial_id}: action of {actor} for tick {tick}, which it was never sent")
                refused = self.bus.trust.check(r.key, r.headers, r.value)
                if refused:
                    check.fail(f"{t.trial_id}: action of {actor} at tick {tick} is refused: {refused}")
                try:
                    action = self.bus.codec.decode(r.value, "action")
                    assert isinstance(action, Action), f"value is a {type(action).__name__}"
                    assert (action.trial_id, action.tick, action.actor) == (t.trial_id, tick, actor), "value and headers disagree"
                    assert r.header(HEADER_RECEIVER) == "", "receiver header must be empty"
                    expected = schemas[classes[actor]].action.fingerprint
                    assert action.payload[2:10] == expected, f"payload written with fingerprint {action.payload[2:10].hex()}, the class's action schema is {expected.hex()}"
                    self.bus.store.decode(action.payload, schemas[classes[actor]].action)
                except Exception as exc:
                    check.fail(f"{t.trial_id}: action of {actor} at tick {tick}: {exc}")
                obs = out.observed.get((tick, actor))
                if obs is not None and tick not in (0, out.restart_tick):  # tick 0 may wait for a starting service
                    lat.append(r.timestamp_ms - obs.timestamp_ms)
            for key in out.observed:
                if counts[key] == 0 and not any(f"tick {key[0]}:" in p for p in out.missing):
                    check.fail(f"{t.trial_id}: no action of {key[1]} at tick {key[0]}")
            for (tick, actor), n in counts.items():
                if n > 1:
                    target = duplicates if tick in out.duplicated_ticks else restart if out.restart_tick is not None and tick <= out.restart_tick else check
                    target.fail(f"{t.trial_id}: {n} actions of {actor} at tick {tick}")
            answered += sum(counts.values())
            if out.restart_tick is not None:
                restart.facts = f"killed after tick {out.restart_tick - 1}, restarted, {TICKS} ticks answered once each" if not restart.problems else ""
            if out.duplicated_ticks:
                duplicates.facts = f"observations of tick {min(out.duplicated_ticks)} and a reward sent twice"
        check.facts = f"{sum(len(o.observed) for o in outcomes)} observations, {answered} actions, {len(outcomes)} trials"
        limit = min(o.started.response_timeout_ms for o in outcomes)
        if lat:
            lat.sort()
            late = [x for x in lat if x >= limit]
            timely.facts = f"p50 {statistics.median(lat):.0f} ms, max {lat[-1]:.0f} ms, limit {limit} ms"
            if late:
                timely.fail(f"{len(late)} of {len(lat)} answers took longer than {limit} ms")
        else:
            timely.fail("no answer to measure")

    def check_probes(self, out: Outcome, check: Check, duplicates: Check) -> None:
        """Each probe answer lists exactly the rewards and messages the log held for that
        actor before the probe, each identity once, in log order."""
        t = out.started
        classes = {a.name: a.actor_class for a in t.actors}
        if not out.probes:
            check.fail("no probe was sent (the trial ended early)")
        for pid, actor, offset in out.probes:
            answers = self._probe_answer(out, pid)
            if not answers:
                check.fail(f"probe {pid}: no answer from {actor}")
                continue
            try:
                msg = self.bus.codec.decode(answers[0].value, "message")
                body = orjson.loads(msg.payload)
                assert msg.sender == actor and msg.receivers == ("conformance",), f"answer from {msg.sender} to {msg.receivers}"
                assert body.get(f"{PROBE}.ack") == pid, "the answer names another probe"
            except Exception as exc:
                check.fail(f"probe {pid}: bad answer: {exc}")
                continue
            want_rewards, want_messages, seen = [], [], set()
            for r in out.log.records:
                if r.offset >= offset:
                    break
                kind = r.header(HEADER_KIND)
                if kind == "reward":
                    e = self.bus.codec.decode(r.value, kind)
                    if reaches(e.receiver, e.sender, actor, classes[actor]) and ("r", e.tick, e.sender) not in seen:
                        seen.add(("r", e.tick, e.sender))
                        want_rewards.append([e.tick, e.sender, e.value])
                elif kind == "message":
                    e = self.bus.codec.decode(r.value, kind)
                    addressed = any(reaches(x, e.sender, actor, classes[actor]) for x in e.receivers)
                    if addressed and PROBE not in orjson.loads(e.payload) and ("m", e.sender, e.message_id) not in seen:
                        seen.add(("m", e.sender, e.message_id))
                        want_messages.append([e.tick, e.sender, e.message_id])
            if body.get("rewards") != want_rewards:
                check.fail(f"probe {pid}: rewards received {body.get('rewards')}, the log holds {want_rewards}")
            if body.get("messages") != want_messages:
                check.fail(f"probe {pid}: messages received {body.get('messages')}, the log holds {want_messages}")
            judged = [x for x in body.get("rewards", []) if x[1] == "judge"]
            if len(judged) > 1:
                duplicates.fail(f"probe {pid}: the repeated reward was received {len(judged)} times")
        check.facts = f"{len(out.probes)} probes answered with rewards (live, retroactive, to *, to class.*) and messages"

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
            self.check_seats(outcomes, seat)
        self.check_answers(outcomes, answers, duplicates, restart, timely)
        self.check_probes(battery, delivery, duplicates)
        return c


def report(checks: list[Check], out=sys.stdout) -> int:
    for check in checks:
        print(check.line(), file=out)
    passed = sum(1 for c in checks if not c.skipped and not c.problems)
    failed = sum(1 for c in checks if not c.skipped and c.problems)
    skipped = sum(1 for c in checks if c.skipped)
    print(f"conformance: {passed} passed, {failed} failed, {skipped} skipped", file=out)
    return 0 if failed == 0 and passed > 0 else 1


async def run_conformance(settings: Settings, spec_file: str, implementation: str, command: str | None, *, trials: int, seed: int) -> int:
    from trialog.bus import connect
    from trialog.tools.campaign import _settings_env

    settings = dataclasses.replace(settings, topic_prefix=f"{settings.topic_prefix}conformance-{uuid.uuid4().hex[:8]}.")
    bus = connect(settings)
    spec = load_spec(spec_file, bus.store)
    if implementation not in spec.actors:
        raise TrialogError(f"no actor implementation {implementation!r} in {spec_file}; declared: {', '.join(spec.actors)}")
    impl = spec.actors[implementation]
    if command:
        argv = shlex.split(command)
    elif impl.served_here:
        argv = [sys.executable, "-m", "trialog.cli", "serve", "actors", "--implementation", implementation, "--spec", spec_file, "--health-port", "0"]
    else:
        raise TrialogError(f"{implementation!r} is served outside Trialog: pass --command, the command that serves it")
    logs = Path(tempfile.mkdtemp(prefix="trialog-conformance-"))
    # The command gets what a deployment gives it: an actor service its own key only, a
    # seat only its join token (TRIALOG_JOIN_TOKEN, with TRIALOG_HOLDER).
    env = {k: v for k, v in _settings_env(settings).items() if not k.startswith("TRIALOG_KEY_")}
    env["TRIALOG_KEYRING"] = ""
    if not impl.client:
        key_id = actor_key_id(implementation)
        secret = bus.trust.keyring.key(key_id)
        if secret is None:
            raise TrialogError(f"the keyring ({bus.trust.keyring.source}) cannot give {key_id}: conformance needs the operator's keyring")
        env["TRIALOG_KEY_" + key_id.upper().replace(".", "_").replace("-", "_")] = base64.urlsafe_b64encode(secret).rstrip(b"=").decode()

    def make_service(extra: dict[str, str], name: str = "service") -> ServiceUnderTest:
        return ServiceUnderTest(argv, {**env, **extra}, logs / f"{name}.log")

    print(f"conformance: {implementation} from {spec_file}, topics {settings.topic_prefix}*, logs in {logs}", flush=True)
    async with bus:
        await bus.create_topics()
        checks = await Suite(bus, spec, implementation, make_service, trials=trials, seed=seed).run()
    code = report(checks)
    if code:
        print(f"--- the logs of the command under test are in {logs}", file=sys.stderr)
    return code


def add_cli(sub) -> None:
    from trialog.commands.parts import command, positive_int, run_async
    from trialog.settings import from_args

    p = command(sub, "conformance", "Check an actor service (any language) against the protocol, on the broker: one line per check.")
    p.add_argument("--implementation", required=True, metavar="NAME", help="the spec's actor implementation under test")
    p.add_argument("--command", metavar="CMD", help="the command serving NAME (default for a Python implementation: trialog serve actors)")
    p.add_argument("--trials", type=positive_int, default=3, help="trials in all: one with every injection, the others plain and concurrent (default 3)")
    p.add_argument("--seed", type=int, default=1, help="seed of the first trial")

    def go(args) -> int:
        spec_file = from_args(args).spec
        if not spec_file:
            raise TrialogError("conformance needs --spec FILE (or TRIALOG_SPEC)")
        return run_async(run_conformance(from_args(args), spec_file, args.implementation, args.command, trials=args.trials, seed=args.seed))

    p.set_defaults(func=go)
