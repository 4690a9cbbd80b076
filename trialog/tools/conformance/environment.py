"""Conformance of an environment service: the suite plays orchestrator and actors, the
service under test hosts the trials (docs/protocol.md, "Conformance of an environment
service").

It writes ``trial.started`` for the spec's trial with the environment under test, answers
every observation with a scripted action (an enum's symbols in turn, else the class's
default action), and between ticks withholds an action (the timeout policy), repeats
records (``trial.started``, actions), sends a late action, requests termination, and
SIGKILLs and restarts the service. :func:`judge` then reads each trial's log back:
observations, rewards, timeouts, the end, tags, duplicates, recovery, and — with a
reference environment of the spec (``--same-as``) — every observation's payload and every
reward against that environment stepped with the same actions.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
import tempfile
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from trialog.bus.base import Bus, Record
from trialog.errors import TrialogError
from trialog.protocol.events import (
    HEADER_KIND,
    HEADER_RECEIVER,
    HEADER_REWARD,
    HEADER_SENDER,
    HEADER_TICK,
    Action,
    Observation,
    TrialEnded,
    TrialStarted,
    TrialTerminating,
)
from trialog.protocol.topics import EVENTS
from trialog.protocol.trial import ClassSchemas, class_schemas, trial_info
from trialog.settings import Settings
from trialog.spec import Spec, load_entry, load_spec
from trialog.tools.conformance.checks import Check
from trialog.tools.conformance.harness import give_key, keyless_env, own_topics, run_checks
from trialog.tools.conformance.trial import RESTART_TIMEOUT_S, ServiceUnderTest, TrialLog
from trialog.trust.tags import MAC_PREFIX, MacKey, mac_input

BATTERY_TICKS = 10  # max_ticks of the trial with every injection
WITHHELD_TICK = 3  # the battery withholds its first actor's action here (the timeout policy)
KILL_TICK = 6  # the service is SIGKILLed once this tick's observations are in; the actions are written while it is down
TERMINATE_TICK = 2  # the terminated trial's terminate request comes with this tick's actions
MAX_TIMEOUT_MS = 3000  # the trials' response timeout: the spec's, at most this (the suite waits it out)
ENV_KINDS = frozenset({"observation", "reward", "message", "actor.timeout", "actor.left", "environment.done", "view"})
TO_ACTORS = frozenset({"observation", "reward", "message", "actor.timeout", "actor.left"})

ENV_CHECKS = (
    "writes the observations of tick 0 on trial.started, then one per active actor per tick, in the class's schema",
    "steps once every action is in: the tick's rewards, then the next tick's observations",
    "tags what it writes with the environment key and each receiving actor's",
    "applies the timeout policy: actor.timeout after the response timeout, read back, then steps",
    "ignores duplicates and late records (a repeated trial.started and actions, a late action)",
    "ends the trial: final observations, environment.done with its reason, nothing after trial.ended",
    "resumes after a SIGKILL from the log, writing only what the log lacks",
    "observations and rewards equal the reference environment's",
)


@dataclass
class EnvOutcome:
    """One trial as the suite played it: what it sent, what the reference gave."""

    name: str  # battery, drop, terminate
    started: TrialStarted
    log: TrialLog
    actions: dict[int, dict[str, Any]] = field(default_factory=dict)  # tick -> actor -> action sent (decoded)
    withheld: dict[int, str] = field(default_factory=dict)  # tick -> the actor whose action was withheld
    obs_time: dict[int, int] = field(default_factory=dict)  # tick -> log time (ms) of its first observation
    restart_tick: int | None = None
    terminate_tick: int | None = None
    ended_offset: int | None = None
    last_tick: int = 0
    missing: list[str] = field(default_factory=list)
    reference: dict[int, tuple[dict[str, bytes], set[tuple[str, float]]]] = field(default_factory=dict)
    reference_problem: str = ""


def scripted_action(schemas: ClassSchemas, tick: int, index: int) -> Any:
    """A deterministic valid action: an enum's symbols in turn (the actors agree but on
    ticks 1, 5, 9…, so that a game neither stalls nor ends at once), else the default."""
    js = schemas.action_json
    if isinstance(js, dict) and js.get("type") == "enum":
        symbols = js["symbols"]
        return symbols[(tick + (index if tick % 4 == 1 else 0)) % len(symbols)]
    return schemas.default_action


class EnvSuite:
    def __init__(
        self, bus: Bus, spec: Spec, environment: str, service: ServiceUnderTest, *, same_as: str | None, seed: int
    ):
        self.bus, self.spec, self.environment, self.service = bus, spec, environment, service
        self.same_as, self.seed = same_as, seed
        self.run_id = uuid.uuid4().hex[:8]

    def resolve(self, trial_id: str, seed: int, *, max_ticks: int, policy: str | None = None) -> TrialStarted:
        t, spec = self.spec.trial, self.spec
        env = spec.environments[self.environment]
        return TrialStarted(
            trial_id, spec=spec.name, environment=self.environment, environment_entry=env.entry or "",
            environment_config=orjson.dumps({**env.config, **t.environment_config}).decode(),
            actors=tuple(a.wire(spec.actors[a.implementation]) for a in t.actors),
            actor_classes=tuple(c.wire() for c in spec.actor_classes.values()), seed=seed, max_ticks=max_ticks,
            response_timeout_ms=min(t.response_timeout_ms, MAX_TIMEOUT_MS), timeout_policy=policy or t.timeout_policy,
            parameters=orjson.dumps(dict(t.parameters)).decode(),
        )  # fmt: skip

    def observations_at(self, log: TrialLog, tick: int) -> dict[str, Record]:
        return {r.header(HEADER_RECEIVER): r for r in log.of_kind("observation") if r.header(HEADER_TICK) == str(tick)}

    async def play(self, name: str, n: int, *, max_ticks: int, policy: str | None = None) -> EnvOutcome:
        trial_id = f"conformance-env-{self.run_id}-{n}"
        started = self.resolve(trial_id, self.seed + n, max_ticks=max_ticks, policy=policy)
        log = TrialLog(self.bus, trial_id)
        await log.start()
        out = EnvOutcome(name, started, log)
        schemas = class_schemas(self.bus.store, started)
        classes = {a.name: a.actor_class for a in started.actors}
        order = [a.name for a in started.actors]
        reference = self._reference(started, out)
        if reference is not None:
            try:
                out.reference[0] = (self._encoded(reference.start(), schemas, classes), set())
            except Exception as exc:
                out.reference_problem, reference = f"the reference environment failed at start: {exc}", None
        await self.bus.publish(EVENTS, started)
        active = set(order)
        tick = 0
        while True:
            wait = RESTART_TIMEOUT_S if tick in (0, out.restart_tick) else started.response_timeout_ms / 1000 + 10
            got = await log.wait_for(lambda tick=tick: self._tick_in(log, tick, active), wait)
            if not got:
                out.missing.append(f"tick {tick}: no observations for {', '.join(sorted(active))} within {wait:.0f} s")
                break
            obs = self.observations_at(log, tick)
            if obs:  # else the environment ended the trial without them (it failed)
                out.obs_time[tick] = min(r.timestamp_ms for r in obs.values())
                out.last_tick = tick
            decoded = {a: self.bus.codec.decode(r.value, "observation") for a, r in obs.items()}
            if log.of_kind("environment.done") or any(o.final for o in decoded.values()):
                break
            if name == "battery" and tick == 1:  # a repeated trial.started must not restart the trial
                await self.bus.send_many([self.bus.to_record(EVENTS, started)])
            if name == "battery" and tick == KILL_TICK:
                await asyncio.sleep(0.5)
                self.service.kill()
                out.restart_tick = tick + 1
            withheld = None
            if (name == "battery" and tick == WITHHELD_TICK) or (name == "drop" and tick == 1):
                withheld = order[0]
                out.withheld[tick] = withheld
            actions: dict[str, Any] = {}
            records = []
            for i, actor in enumerate(order):
                if actor not in active or actor == withheld:
                    continue
                cls = schemas[classes[actor]]
                actions[actor] = scripted_action(cls, tick, i)
                payload = cls.action.encode(actions[actor])
                records.append(self.bus.to_record(EVENTS, Action(trial_id, tick=tick, actor=actor, payload=payload)))
            if name == "terminate" and tick == TERMINATE_TICK:
                await self.bus.publish(
                    EVENTS, TrialTerminating(trial_id, reason="conformance", requested_by="conformance")
                )
                out.terminate_tick = tick
            await self.bus.send_many(records)
            if name == "battery" and tick == 2:  # byte-identical repeats
                await self.bus.send_many(records)
            if withheld is not None:
                found = await log.wait_for(
                    lambda tick=tick: [r for r in log.of_kind("actor.timeout") if r.header(HEADER_TICK) == str(tick)],
                    started.response_timeout_ms / 1000 + 10,
                )
                if found:
                    t = self.bus.codec.decode(found[0].value, "actor.timeout")
                    if t.policy == "default_action" and schemas[classes[withheld]].has_default_action:
                        actions[withheld] = schemas[classes[withheld]].default_action
                    else:
                        active.discard(withheld)
                        reference = None  # an environment decides alone what a trial without an actor becomes
                    # the late answer, after its timeout: it must change nothing
                    cls = schemas[classes[withheld]]
                    late = Action(
                        trial_id, tick=tick, actor=withheld, payload=cls.action.encode(scripted_action(cls, tick, 0))
                    )
                    await self.bus.send_many([self.bus.to_record(EVENTS, late)])
            out.actions[tick] = actions
            if out.restart_tick == tick + 1:
                await asyncio.sleep(0.5)
                self.service.start()
            if reference is not None:
                try:
                    step = reference.update(actions)
                    rewards = (
                        step.rewards.items()
                        if isinstance(step.rewards, dict)
                        else [(r.receiver, r.value) for r in step.rewards]
                    )
                    out.reference[tick + 1] = (
                        self._encoded(step.observations, schemas, classes, active),
                        {(r, float(v)) for r, v in rewards},
                    )
                except Exception as exc:
                    out.reference_problem, reference = f"the reference environment failed at tick {tick}: {exc}", None
            tick += 1
        await log.wait_for(lambda: log.of_kind("environment.done"), 5)
        done = log.of_kind("environment.done")
        end_tick = self.bus.codec.decode(done[0].value, "environment.done").tick if done else tick
        ended = await self.bus.publish(EVENTS, TrialEnded(trial_id, tick=end_tick, reason="environment"))
        out.ended_offset = ended.offset
        if name == "battery":  # actions after the end change nothing, and nothing follows trial.ended
            cls = schemas[classes[order[0]]]
            await self.bus.publish(
                EVENTS,
                Action(
                    trial_id,
                    tick=end_tick,
                    actor=order[0],
                    payload=cls.action.encode(
                        cls.default_action if cls.has_default_action else scripted_action(cls, 0, 0)
                    ),
                ),
            )
        await asyncio.sleep(2.0)
        await log.stop()
        return out

    def _tick_in(self, log: TrialLog, tick: int, active: set[str]) -> bool:
        return active <= set(self.observations_at(log, tick)) or bool(log.of_kind("environment.done"))

    def _reference(self, started: TrialStarted, out: EnvOutcome):
        if not self.same_as:
            return None
        impl = self.spec.environments[self.same_as]
        try:
            return load_entry(impl.entry, what=f"environment {self.same_as}")(trial_info(started))
        except Exception as exc:
            out.reference_problem = f"the reference environment {self.same_as} did not start: {exc}"
            return None

    @staticmethod
    def _encoded(observations, schemas, classes, active=None) -> dict[str, bytes]:
        return {
            a: schemas[classes[a]].observation.encode(o)
            for a, o in observations.items()
            if active is None or a in active
        }

    async def run(self) -> list[Check]:
        checks = [Check(name) for name in ENV_CHECKS]
        self.service.start()
        try:
            battery = await self.play("battery", 0, max_ticks=BATTERY_TICKS)
            others = await asyncio.gather(
                self.play("drop", 1, max_ticks=6, policy="drop"), self.play("terminate", 2, max_ticks=8)
            )
        finally:
            self.service.stop()
        judge(self.bus, [battery, *others], checks)
        if not self.same_as:
            checks[
                -1
            ].skipped = "no reference environment: pass --same-as NAME (an environment of the spec with an entry)"
        return checks


def _tag_problem(bus: Bus, r: Record) -> str | None:
    """Why a record written as the environment's is not tagged as it must be, or None."""
    refused = bus.trust.check(r.key, r.headers, r.value)
    if refused:
        return refused
    kind = r.header(HEADER_KIND) or ""
    if kind not in TO_ACTORS:
        return None
    trial_id = r.key.decode()
    headers = {k: v or b"" for k, v in r.headers}
    message = mac_input(r.key, headers, r.value)
    for key_id in bus.trust.audience_keys(trial_id, kind, r.header(HEADER_RECEIVER) or ""):
        secret = bus.trust.keyring.key(key_id, trial_id)
        tag = headers.get(MAC_PREFIX + key_id)
        if secret is None or tag is None:
            return f"no tag {MAC_PREFIX}{key_id} for its receiver"
        if tag != MacKey(secret).tag(message):
            return f"the tag {MAC_PREFIX}{key_id} does not match the record"
    return None


def judge(bus: Bus, outcomes: list[EnvOutcome], checks: list[Check]) -> None:
    observe, step, tags, timeouts, duplicates, end, restart, same = checks
    n_obs = n_rewards = n_tags = 0
    latencies: list[int] = []
    for out in outcomes:
        t = out.started
        tid = f"{t.trial_id} ({out.name})"
        schemas = class_schemas(bus.store, t)
        classes = {a.name: a.actor_class for a in t.actors}
        records = out.log.records
        for problem in out.missing:
            (restart if out.restart_tick is not None and f"tick {out.restart_tick}:" in problem else observe).fail(
                f"{tid} {problem}"
            )
        # Everything the environment wrote: tags, headers against values, each identity once.
        identities: Counter = Counter()
        env_records = [
            r
            for r in records
            if (r.header(HEADER_SENDER) or "").split("/")[0] == "env" and r.header(HEADER_KIND) in ENV_KINDS
        ]
        for r in env_records:
            n_tags += 1
            problem = _tag_problem(bus, r)
            if problem:
                tags.fail(f"{tid}: {r.header(HEADER_KIND)} at tick {r.header(HEADER_TICK)}: {problem}")
            try:
                e = bus.codec.decode(r.value, r.header(HEADER_KIND))
            except Exception as exc:
                observe.fail(f"{tid}: {r.header(HEADER_KIND)} at offset {r.offset} does not decode: {exc}")
                continue
            identities[
                (e.KIND, e.event_tick(), e.event_sender(), e.event_receiver(), getattr(e, "message_id", ""))
            ] += 1
            if isinstance(e, Observation) and e.reward is not None:  # and the reward record it stands for
                carried = e.carried_reward()
                identities[(carried.KIND, carried.tick, carried.sender, carried.receiver, "")] += 1
            if out.ended_offset is not None and r.offset > out.ended_offset:
                end.fail(f"{tid}: {e.KIND} at tick {e.event_tick()} written after trial.ended")
        for identity, count in identities.items():
            if count > 1:
                kind, tick = identity[0], identity[1]
                repeated = tick == 0 or (out.name == "battery" and tick == 3)  # trial.started and the actions of tick 2
                recovered = out.restart_tick is not None and 0 < tick <= out.restart_tick
                target = restart if recovered and not (kind == "observation" and repeated) else duplicates
                target.fail(f"{tid}: {count} records of {kind} at tick {tick} to {identity[3] or '-'}")
        # Observations: each tick's, for every active actor, in the class's schema.
        active = set(classes)
        final_seen = False
        for tick in range(out.last_tick + 1):
            obs = [r for r in records if r.header(HEADER_KIND) == "observation" and r.header(HEADER_TICK) == str(tick)]
            by_actor = {}
            for r in obs:
                try:
                    o = bus.codec.decode(r.value, "observation")
                    assert (o.trial_id, o.tick, o.actor) == (t.trial_id, tick, r.header(HEADER_RECEIVER)), (
                        "value and headers disagree"
                    )
                    assert r.header(HEADER_REWARD) == (None if o.reward is None else "1"), (
                        f"reward header {r.header(HEADER_REWARD)!r}, but the value carries "
                        f"{'no reward' if o.reward is None else 'one'}"
                    )
                    assert r.header(HEADER_SENDER) == "env", f"sender {r.header(HEADER_SENDER)!r}, not env"
                    expected = schemas[classes[o.actor]].observation
                    assert o.payload[2:10] == expected.fingerprint, (
                        "payload not written with the class's observation schema"
                    )
                    bus.store.decode(o.payload, expected)
                    by_actor.setdefault(o.actor, o)
                    final_seen |= o.final
                except Exception as exc:
                    observe.fail(f"{tid}: observation at tick {tick}: {exc}")
            n_obs += len(obs)
            if set(by_actor) != active and f"tick {tick}:" not in " ".join(out.missing):
                observe.fail(f"{tid}: tick {tick}: observations for {sorted(by_actor)}, active actors {sorted(active)}")
            if tick > 0 and tick - 1 in out.actions:  # stepped on the actions of tick-1: after them, rewards before
                first_obs = min((r.offset for r in obs), default=None)
                if first_obs is not None:
                    inputs: dict[str, int] = {}  # actor -> offset of its first action (or timeout) of tick-1
                    for r in records:
                        if r.header(HEADER_TICK) != str(tick - 1):
                            continue
                        if r.header(HEADER_KIND) == "action":
                            inputs.setdefault(r.header(HEADER_SENDER) or "", r.offset)
                        elif r.header(HEADER_KIND) == "actor.timeout":
                            inputs.setdefault(r.header(HEADER_RECEIVER) or "", r.offset)
                    if inputs and first_obs < max(inputs.values()):
                        step.fail(f"{tid}: the observations of tick {tick} came before an action of tick {tick - 1}")
                    rewards = [
                        r
                        for r in records
                        if r.header(HEADER_KIND) == "reward"
                        and r.header(HEADER_TICK) == str(tick - 1)
                        and (r.header(HEADER_SENDER) or "").startswith("env")
                    ]
                    # The environment's rewards of tick-1: its records, and those the observations carry.
                    carried = {a: o.reward for a, o in by_actor.items() if o.reward is not None}
                    n_rewards += len(carried)
                    for r in rewards:
                        n_rewards += 1
                        rw = bus.codec.decode(r.value, "reward")
                        if (rw.tick, rw.receiver, rw.sender) != (
                            tick - 1,
                            r.header(HEADER_RECEIVER),
                            r.header(HEADER_SENDER),
                        ):
                            step.fail(f"{tid}: reward at tick {tick - 1}: value and headers disagree")
                        if r.offset > first_obs:
                            step.fail(f"{tid}: reward of tick {tick - 1} after the observations of tick {tick}")
                    if tick - 1 in out.obs_time and tick - 1 not in out.withheld and tick != out.restart_tick:
                        sent = [
                            r.timestamp_ms
                            for r in records
                            if r.header(HEADER_KIND) == "action" and r.header(HEADER_TICK) == str(tick - 1)
                        ]
                        if sent:
                            latencies.append(min(r.timestamp_ms for r in obs) - max(sent))
                    if same is not None and tick in out.reference:
                        want_obs, want_rewards = out.reference[tick]
                        got_rewards = {
                            (bus.codec.decode(r.value, "reward").receiver, bus.codec.decode(r.value, "reward").value)
                            for r in rewards
                        } | set(carried.items())
                        if got_rewards != want_rewards:
                            same.fail(
                                f"{tid}: rewards of tick {tick - 1}: {sorted(got_rewards)}, "
                                f"the reference gives {sorted(want_rewards)}"
                            )
            if same is not None and tick in out.reference:
                for actor, payload in out.reference[tick][0].items():
                    if actor in by_actor and by_actor[actor].payload != payload:
                        same.fail(f"{tid}: observation of {actor} at tick {tick} differs from the reference's")
            for r in [
                x for x in records if x.header(HEADER_KIND) == "actor.left" and x.header(HEADER_TICK) == str(tick)
            ]:
                active.discard(r.header(HEADER_RECEIVER))
            active -= {a for a, o in by_actor.items() if o.final}
        if out.reference_problem:
            same.fail(f"{tid}: {out.reference_problem}")
        # Timeouts: the withheld actor, after the response timeout, with the trial's policy.
        for tick, actor in out.withheld.items():
            found = [
                r for r in records if r.header(HEADER_KIND) == "actor.timeout" and r.header(HEADER_TICK) == str(tick)
            ]
            left = [r for r in records if r.header(HEADER_KIND) == "actor.left" and r.header(HEADER_TICK) == str(tick)]
            if [r.header(HEADER_RECEIVER) for r in found] != [actor]:
                timeouts.fail(
                    f"{tid}: tick {tick}: actor.timeout for {[r.header(HEADER_RECEIVER) for r in found]}, "
                    f"the silent actor is {actor}"
                )
                continue
            to = bus.codec.decode(found[0].value, "actor.timeout")
            waited = found[0].timestamp_ms - out.obs_time.get(tick, found[0].timestamp_ms)
            if to.policy != t.timeout_policy:
                timeouts.fail(f"{tid}: actor.timeout says policy {to.policy}, the trial's is {t.timeout_policy}")
            if waited < 0.9 * t.response_timeout_ms:
                timeouts.fail(
                    f"{tid}: actor.timeout {waited} ms after the observation, "
                    f"before the response timeout ({t.response_timeout_ms} ms)"
                )
            if waited > t.response_timeout_ms + 5000:
                timeouts.fail(
                    f"{tid}: actor.timeout {waited} ms after the observation "
                    f"(response timeout {t.response_timeout_ms} ms)"
                )
            leaves = t.timeout_policy != "default_action" or not schemas[classes[actor]].has_default_action
            if leaves != bool(left):
                timeouts.fail(
                    f"{tid}: tick {tick}: {'no ' if leaves else ''}actor.left for {actor} "
                    f"with policy {t.timeout_policy}"
                )
            later = [
                r
                for r in records
                if r.header(HEADER_KIND) == "observation"
                and r.header(HEADER_RECEIVER) == actor
                and int(r.header(HEADER_TICK) or 0) > tick
            ]
            if leaves and any(not bus.codec.decode(r.value, "observation").final for r in later):
                timeouts.fail(f"{tid}: {actor} left at tick {tick} but is observed later")
            if not out.log.of_kind("environment.done") and tick + 1 > out.last_tick:
                timeouts.fail(f"{tid}: no step after the timeout of tick {tick}")
        # The end: environment.done with the reason, final observations before it.
        done = [bus.codec.decode(r.value, "environment.done") for r in out.log.of_kind("environment.done")]
        if not done:
            end.fail(f"{tid}: no environment.done")
        else:
            d = done[0]
            want = {
                "battery": ("max_ticks", "environment"),
                "drop": ("environment", "max_ticks", "error"),  # a game may not go on without an actor
                "terminate": ("terminated", "environment"),
            }[out.name]
            if d.reason not in want or (out.name == "battery" and d.reason == "max_ticks" and d.tick != BATTERY_TICKS):
                end.fail(
                    f"{tid}: environment.done at tick {d.tick} with reason {d.reason!r}, expected {' or '.join(want)}"
                )
            if out.name == "terminate" and d.reason == "terminated" and d.tick != (out.terminate_tick or 0) + 1:
                end.fail(
                    f"{tid}: terminated at tick {d.tick}, "
                    f"expected the tick after the request ({(out.terminate_tick or 0) + 1})"
                )
            if d.reason not in ("error", "environment") and not final_seen:
                end.fail(f"{tid}: no final observation before environment.done ({d.reason})")
            if d.reason == "error" and out.name != "drop":
                end.fail(f"{tid}: the environment failed: {d.details}")
        if out.restart_tick is not None and not restart.problems:
            restart.facts = (
                f"killed after tick {out.restart_tick - 1}'s observations, its actions written while down, "
                f"tick {out.restart_tick} written once"
            )
    observe.facts = f"{n_obs} observations, {len(outcomes)} trials"
    if latencies:
        latencies.sort()
        p50 = latencies[len(latencies) // 2]
        step.facts = f"{n_rewards} rewards; step p50 {p50} ms from the last action to the next observations"
    tags.facts = f"{n_tags} records checked"
    timeouts.facts = "default_action and drop" if not timeouts.problems else ""
    duplicates.facts = "trial.started and the actions of tick 2 sent twice, a late action, an action after the end"


async def run_environment_conformance(
    settings: Settings, spec_file: str, environment: str, command: str | None, *, same_as: str | None, seed: int
) -> int:
    from trialog.bus import connect

    settings = own_topics(settings)
    bus = connect(settings)
    spec = load_spec(spec_file, bus.store)
    if environment not in spec.environments:
        raise TrialogError(f"no environment {environment!r} in {spec_file}; declared: {', '.join(spec.environments)}")
    if same_as is not None and (same_as not in spec.environments or not spec.environments[same_as].entry):
        raise TrialogError(f"--same-as {same_as!r}: not an environment of {spec_file} with an entry")
    impl = spec.environments[environment]
    if command:
        argv = shlex.split(command)
    elif impl.entry and not impl.external:
        argv = [sys.executable, "-m", "trialog.cli", "serve", "environment", "--implementation", environment,
                "--spec", spec_file, "--health-port", "0"]  # fmt: skip
    else:
        raise TrialogError(f"{environment!r} is served outside Trialog: pass --command, the command that serves it")
    logs = Path(tempfile.mkdtemp(prefix="trialog-conformance-"))
    # An environment service is core: it gets the deployment's keyring, as TRIALOG_KEY_* variables.
    env = keyless_env(settings)
    for key_id in ("orchestrator", "environment", "controller", "gateway", "learner", "actors", "seats"):
        give_key(env, bus.trust.keyring, key_id)
    service = ServiceUnderTest(argv, env, logs / "service.log")
    print(
        f"conformance: environment {environment} from {spec_file}, topics {settings.topic_prefix}*, logs in {logs}",
        flush=True,
    )
    return await run_checks(
        bus, logs, lambda: EnvSuite(bus, spec, environment, service, same_as=same_as, seed=seed).run()
    )
