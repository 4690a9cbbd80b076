"""The checks of ``trialog conformance``: what each asks of the service under test, how
the trials' logs are judged against it, and the report (one line per check, a summary)."""

from __future__ import annotations

import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field

import orjson

from trialog.bus.base import Bus
from trialog.protocol.events import (
    HEADER_KIND,
    HEADER_RECEIVER,
    HEADER_REWARD,
    HEADER_SENDER,
    HEADER_TICK,
    Action,
    Observation,
)
from trialog.protocol.inbox import PROBE
from trialog.protocol.trial import class_schemas, reaches
from trialog.tools.conformance.trial import TICKS, Outcome, probe_answer


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


def check_seats(bus: Bus, outcomes: list[Outcome], check: Check) -> None:
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
                refused = bus.trust.check(r.key, r.headers, r.value)
                if refused:
                    check.fail(f"{out.started.trial_id}: the join of {a.name} is refused: {refused}")
                if r.header("holder") != f"conformance-{a.name}":
                    check.fail(
                        f"{out.started.trial_id}: the join of {a.name} names holder {r.header('holder')!r}, "
                        "not the one it was given"
                    )
                joined = bus.codec.decode(r.value, "actor.joined")
                if (joined.trial_id, joined.actor) != (out.started.trial_id, a.name):
                    check.fail(f"{out.started.trial_id}: a join whose value says {joined.actor} of {joined.trial_id}")
    check.facts = f"{joins} joins with a join token, each tagged with its seat key and holder"


def check_answers(
    bus: Bus, outcomes: list[Outcome], check: Check, duplicates: Check, restart: Check, timely: Check
) -> None:
    answered = 0
    lat: list[float] = []
    for out in outcomes:
        t = out.started
        schemas = class_schemas(bus.store, t)
        classes = {a.name: a.actor_class for a in t.actors}
        for problem in out.missing:
            (restart if out.restart_tick is not None and f"tick {out.restart_tick}:" in problem else check).fail(
                f"{t.trial_id} {problem}"
            )
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
            refused = bus.trust.check(r.key, r.headers, r.value)
            if refused:
                check.fail(f"{t.trial_id}: action of {actor} at tick {tick} is refused: {refused}")
            try:
                action = bus.codec.decode(r.value, "action")
                assert isinstance(action, Action), f"value is a {type(action).__name__}"
                assert (action.trial_id, action.tick, action.actor) == (t.trial_id, tick, actor), (
                    "value and headers disagree"
                )
                assert r.header(HEADER_RECEIVER) == "", "receiver header must be empty"
                expected = schemas[classes[actor]].action.fingerprint
                assert action.payload[2:10] == expected, (
                    f"payload written with fingerprint {action.payload[2:10].hex()}, "
                    f"the class's action schema is {expected.hex()}"
                )
                bus.store.decode(action.payload, schemas[classes[actor]].action)
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
                target = (
                    duplicates
                    if tick in out.duplicated_ticks
                    else restart
                    if out.restart_tick is not None and tick <= out.restart_tick
                    else check
                )
                target.fail(f"{t.trial_id}: {n} actions of {actor} at tick {tick}")
        answered += sum(counts.values())
        if out.restart_tick is not None:
            restart.facts = (
                f"killed after tick {out.restart_tick - 1}, restarted, {TICKS} ticks answered once each"
                if not restart.problems
                else ""
            )
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


def check_probes(bus: Bus, out: Outcome, check: Check, duplicates: Check) -> None:
    """Each probe answer lists exactly the rewards and messages the log held for that
    actor before the probe, each identity once, in log order."""
    t = out.started
    classes = {a.name: a.actor_class for a in t.actors}
    if not out.probes:
        check.fail("no probe was sent (the trial ended early)")
    for pid, actor, offset in out.probes:
        answers = probe_answer(out, pid)
        if not answers:
            check.fail(f"probe {pid}: no answer from {actor}")
            continue
        try:
            msg = bus.codec.decode(answers[0].value, "message")
            body = orjson.loads(msg.payload)
            assert msg.sender == actor and msg.receivers == ("conformance",), (
                f"answer from {msg.sender} to {msg.receivers}"
            )
            assert body.get(f"{PROBE}.ack") == pid, "the answer names another probe"
        except Exception as exc:
            check.fail(f"probe {pid}: bad answer: {exc}")
            continue
        want_rewards, want_messages, seen = [], [], set()
        for r in out.log.records:
            if r.offset >= offset:
                break
            kind = r.header(HEADER_KIND)
            # A reward record, or the environment's reward an observation carries: the same to an actor.
            if kind == "reward" or (kind == "observation" and r.header(HEADER_REWARD) is not None):
                e = bus.codec.decode(r.value, kind)
                e = e.carried_reward() if isinstance(e, Observation) else e
                if e is None:
                    continue
                if reaches(e.receiver, e.sender, actor, classes[actor]) and ("r", e.tick, e.sender) not in seen:
                    seen.add(("r", e.tick, e.sender))
                    want_rewards.append([e.tick, e.sender, e.value])
            elif kind == "message":
                e = bus.codec.decode(r.value, kind)
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


def report(checks: list[Check], out=sys.stdout) -> int:
    for check in checks:
        print(check.line(), file=out)
    passed = sum(1 for c in checks if not c.skipped and not c.problems)
    failed = sum(1 for c in checks if not c.skipped and c.problems)
    skipped = sum(1 for c in checks if c.skipped)
    print(f"conformance: {passed} passed, {failed} failed, {skipped} skipped", file=out)
    return 0 if failed == 0 and passed > 0 else 1
