"""One conformance trial: the command under test, the trial the suite starts, the trial's
log as the suite reads it back, and the outcome the checks judge."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from trialog.bus.base import Bus, Record
from trialog.errors import TrialogError
from trialog.protocol.events import HEADER_KIND, TrialStarted
from trialog.protocol.topics import EVENTS
from trialog.spec import Spec

TICKS = 12  # per conformance trial: room for every injection of the suite and a kill
RESTART_TIMEOUT_S = 90.0  # a killed member leaves its group after its session timeout


class ServiceUnderTest:
    """The command serving the implementation, in a process group of its own (so that a
    SIGKILL reaches every process of it, e.g. npm and node)."""

    def __init__(self, argv: list[str], env: dict[str, str], log_file: Path):
        self.argv, self.env, self.log_file = argv, env, log_file
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_file, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

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
            raise TrialogError(
                f"{implementation!r} does not play class {a.actor_class!r} of the spec's trial actor {a.name!r}"
            )
        actors.append(replace(a, implementation=implementation).wire(impl))
    classes = tuple(c.wire() for c in spec.actor_classes.values())
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


def probe_answer(out: Outcome, pid: str) -> list[Record]:
    """The answers to probe ``pid`` in the trial's log (the suite waits for them, a check reads them)."""
    return [r for r in out.log.of_kind("message") if r.header("id") == f"probe-{pid}"]
