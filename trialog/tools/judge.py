"""A judge that rates ticks late, as a person does on the watch page (``trialog judge``).

It watches every trial the gateway lists (``/api/lobby``) as running or ended, created since
the judge came (or ``--since-ms``), each through its watch
socket (``/ws/watch/<trial>``: the trial's history, then live), and rates each actor's step
from tick t to t+1 with a function of the two observations — ``rate(before, after, final)``,
a number or None for no rating. The rating is sent as a reward for tick t from
``person:<name>``, **late**: once the trial has reached tick t + ``lag`` (or ended), so it
lands retroactively, the way a person's judgement does, and the datalog joins it to tick
t. A learner told to learn from judges only (``trialog serve learner --learn-from
'person:*'``) trains on these ratings with the environment's own reward left out.

Every reward gets one answer from the gateway (``rewarded``, or ``error`` with the reason);
the judge counts both, and says them when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trialog.runtime.rates import Bucket
from trialog.telemetry.logs import get_logger
from trialog.tools.campaign import stop_services

log = get_logger(__name__)

Rate = Callable[[Any, Any, bool], "float | None"]
JUDGE_NAME = "judge"  # a preset's judge i rewards as person:judge-<i>
JUDGE_CONFIDENCE = 0.8
JUDGE_LAG = 5  # ticks: a preset's judges' ratings land this late (retroactively), as a person's do
LOBBY_EVERY_S = 0.5  # how often the judge looks for new trials
ANSWERS_WITHIN_S = 10.0  # after a trial's end: how long the judge waits for its last ratings' answers
# Ratings a second, over all the trials one judge watches, in bursts of at most a second's worth:
# the gateway lets one address send 200 messages a second in bursts of 400 (docs/humans.md#limits)
# and refuses the rest. A judge that caught up a trial's history, or watched many trials at once,
# sent faster than that and lost ratings; it now spaces them (they land retroactively anyway).
RATINGS_PER_S = 180.0
FINISH_WITHIN_S = 15.0  # once stopped: how long the judge goes on sending what its ended trials are owed


@dataclass
class Tally:
    trials: int = 0
    sent: int = 0
    answers: Counter = field(default_factory=Counter)  # rewarded / error

    def line(self) -> str:
        errors = self.answers["error"]
        logged = self.answers["rewarded"]
        return f"{self.trials} trials judged, {self.sent} ratings sent, {logged} logged, {errors} refused"


class _Spacing:
    """At most ``per_s`` sends a second in bursts of ``per_s``, shared by every trial a judge
    watches; each send waits for its turn, in the order they asked."""

    def __init__(self, per_s: float):
        self.bucket = Bucket(per_s, burst=per_s, stamp=time.monotonic())

    async def turn(self) -> None:
        wait = self.bucket.reserve(time.monotonic())
        if wait > 0:
            await asyncio.sleep(wait)


class _Trial:
    """One watched trial: each actor's observations by tick, and the ratings waiting for their lag."""

    def __init__(self, rate: Rate, name: str, lag: int, confidence: float):
        self.rate, self.name, self.lag, self.confidence = rate, name, lag, confidence
        self.seen: dict[str, dict[int, Any]] = {}
        self.due: deque[tuple[int, dict]] = deque()  # (send once the trial reaches this tick, the reward)
        self.tick = 0

    def observed(self, msg: dict) -> None:
        actor, tick = msg.get("actor"), int(msg.get("tick", 0))
        after = msg.get("observation")
        if after is None:  # a trial with views sends the view instead (rated then from the view)
            after = msg.get("view")
        self.tick = max(self.tick, tick)
        seen = self.seen.setdefault(actor, {})
        seen[tick] = after
        before = seen.pop(tick - 1, None)
        if before is None:
            return
        value = self.rate(before, after, bool(msg.get("final")))
        if value is not None:
            reward = {
                "type": "reward",
                "judge": self.name,
                "receiver": actor,
                "tick": tick - 1,
                "value": float(value),
                "confidence": self.confidence,
            }
            self.due.append((tick - 1 + self.lag, reward))

    def ready(self, ended: bool) -> list[dict]:
        out = []
        while self.due and (ended or self.due[0][0] <= self.tick):
            out.append(self.due.popleft()[1])
        return out


def _lobby(gateway: str) -> list[dict]:
    with urllib.request.urlopen(f"{gateway}/api/lobby", timeout=5) as response:
        return json.loads(response.read())["trials"]


async def _judge_trial(
    gateway: str, trial_id: str, rate: Rate, name: str, lag: int, confidence: float, tally: Tally, spacing: _Spacing
) -> None:
    import websockets

    state = _Trial(rate, name, lag, confidence)
    url = gateway.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + f"/ws/watch/{trial_id}"
    async with websockets.connect(url, max_size=2**22) as ws:
        sent = answered = 0
        ended = False
        while not ended or answered < sent:
            try:
                raw = await (ws.recv() if not ended else asyncio.wait_for(ws.recv(), ANSWERS_WITHIN_S))
            except (TimeoutError, websockets.ConnectionClosed):
                break
            msg = json.loads(raw)
            kind = msg.get("type")
            if kind == "observation":
                state.observed(msg)
            elif kind in ("rewarded", "error"):
                answered += 1
                tally.answers[kind] += 1
                if kind == "error":
                    log.warning("a rating was refused", trial=trial_id, reason=msg.get("reason") or msg)
            elif kind == "end":
                ended = True
            for reward in state.ready(ended):
                await spacing.turn()
                await ws.send(json.dumps(reward))
                sent += 1
                tally.sent += 1


async def judge(
    gateway: str,
    rate: Rate,
    *,
    name: str = "judge",
    lag: int = 5,
    confidence: float = 0.8,
    spec: str | None = None,
    experiment: str | None = None,
    phases: frozenset[str] = frozenset(),
    since_ms: float | None = None,
    stop: asyncio.Event | None = None,
) -> Tally:
    """Judge the gateway's running trials (of ``spec``, of ``experiment`` and in ``phases``, if
        given: a training run's judge leaves its evaluation trials alone), created since ``since_ms``
    (wall clock; default: now), until ``stop`` is set."""

    def wanted(t: dict) -> bool:
        # Ended too: a short trial may start and end between two looks at the lobby, and a
        # rating after the end counts (retroactive); not those created before the judge came.
        return (
            t["status"] in ("running", "ended")
            and t.get("created_ms", 0) >= since_ms
            and spec in (None, t["spec"])
            and experiment in (None, t.get("experiment"))
            and (not phases or t.get("phase") in phases)
        )

    stop = stop or asyncio.Event()
    tally, watched, tasks, spacing = Tally(), set(), set(), _Spacing(RATINGS_PER_S)
    gateway = gateway.rstrip("/")
    since_ms = time.time() * 1000 if since_ms is None else since_ms
    try:
        while not stop.is_set():
            try:
                trials = await asyncio.to_thread(_lobby, gateway)
            except OSError as exc:
                log.warning("the gateway's lobby did not answer", gateway=gateway, error=str(exc))
                trials = []
            for t in trials:
                if t["trial"] not in watched and wanted(t):
                    watched.add(t["trial"])
                    tally.trials += 1
                    task = asyncio.create_task(
                        _judge_trial(gateway, t["trial"], rate, name, lag, confidence, tally, spacing)
                    )
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), LOBBY_EVERY_S)
        if tasks:  # stopped: the trials that ended are still owed their last ratings
            await asyncio.wait(tasks, timeout=FINISH_WITHIN_S)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return tally


@contextlib.contextmanager
def judge_processes(entries: Sequence[str], experiment: str, gateway: str, log_dir: Path) -> Iterator[None]:
    """A training preset's judges (rating functions by entry) as ``trialog judge`` processes rating
    the experiment's heatup and train trials through the gateway; each says in its log, when
    stopped, what it sent and what was logged."""
    procs, since_ms = [], int(time.time() * 1000)  # the trials to come: the judges may start after the first
    try:
        for i, entry in enumerate(entries):
            command = [sys.executable, "-m", "trialog.cli", "judge", entry, "--gateway", gateway]
            command += ["--name", f"{JUDGE_NAME}-{i}", "--lag", str(JUDGE_LAG), "--confidence", str(JUDGE_CONFIDENCE)]
            command += ["--experiment", experiment, "--phase", "heatup", "--phase", "train"]
            command += ["--since-ms", str(since_ms)]
            with open(log_dir / f"judge-{i}.log", "wb") as out:
                procs.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT))
        yield
    finally:
        stop_services(procs)
