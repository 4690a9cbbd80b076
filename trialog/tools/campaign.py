"""``trialog run``: a campaign of trials from a spec file, with progress and a summary,
optionally with the spec's services run locally (``--serve``) for its duration."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trialog.errors import TrialogError
from trialog.settings import Settings
from trialog.spec import Spec

if TYPE_CHECKING:
    from trialog.bus.base import Bus


# Health ports handed to children of this process. A probe's port is free again once the
# probe closes, so the same port may come up twice before the first child binds it: two
# services would then share a port and the second fail to start.
_HANDED_OUT: set[int] = set()
_BELOW_EPHEMERAL = 12_000  # how many ports under the OS's ephemeral range health ports come from


def _ephemeral_low() -> int:
    """The first port of the OS's ephemeral range (outgoing connections and bind(0) draw from it)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default, and below most systems' ranges


def free_port() -> int:
    """A port for a child's health server: free now, not handed out before, and below the
    OS's ephemeral range. Any outgoing connection or bind(0) on the machine may take an
    ephemeral port in the second between this probe and the child's bind (a busy machine —
    the fuzz suites' thousands of sockets — did, and the child failed to start); below the
    range, only someone naming that very port could."""
    low = _ephemeral_low()
    for _ in range(1000):
        port = random.randrange(max(1024, low - _BELOW_EPHEMERAL), low)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))  # where the child's health server binds
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise TrialogError(f"no free port for a service's health server below port {low}")


def _settings_env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    for f in dataclasses.fields(settings):
        env[f"TRIALOG_{f.name.upper()}"] = str(getattr(settings, f.name))
    env.setdefault("TRIALOG_LOG_FORMAT", "json")
    return env


def start_service(settings: Settings, spec_file: str, args: list[str], log_file: Path) -> tuple[subprocess.Popen, int]:
    """One ``trialog serve ...`` child process with its health port (for readiness)."""
    port = free_port()
    cmd = [sys.executable, "-m", "trialog.cli", "serve", *args, "--spec", spec_file, "--health-port", str(port)]
    with open(log_file, "ab") as out:
        proc = subprocess.Popen(cmd, env=_settings_env(settings), stdout=out, stderr=subprocess.STDOUT)
    return proc, port


class Services(dict):
    """Name → a local service's process, and ``ports``: name → its health port (``/readyz``, ``/metrics``)."""

    def __init__(self):
        super().__init__()
        self.ports: dict[str, int] = {}

    def served_version(self, implementation: str) -> int:
        """The oldest model version the actor services serve ``implementation`` with, from their
        ``trialog_model_version`` gauge (0 while any has none loaded or does not answer)."""
        return self._lowest("actors-", "trialog_model_version", implementation, missing=0)

    def settled_steps(self, implementation: str) -> int:
        """The env steps the learner of ``implementation`` has taken in with no round owed (its
        ``trialog_learner_settled_steps`` gauge; -1 while one is owed or it does not answer)."""
        return self._lowest("learner-", "trialog_learner_settled_steps", implementation, missing=-1)

    def _lowest(self, service: str, metric: str, implementation: str, *, missing: int) -> int:
        """The lowest value of a gauge over the services named ``service…`` (``missing`` for one
        without it, or when there are none)."""
        values = [_gauge(port, metric, implementation) for name, port in self.ports.items() if name.startswith(service)]
        return int(min((missing if v is None else v for v in values), default=missing))


def _gauge(port: int, metric: str, implementation: str) -> float | None:
    """A gauge's value for one implementation, from a service's ``/metrics`` text (None: not there)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as response:
            text = response.read().decode()
    except OSError:
        return None
    series = f'{metric}{{implementation="{implementation}"}} '
    line = next((line for line in text.splitlines() if line.startswith(series)), None)
    return None if line is None else float(line[len(series) :])


@contextlib.contextmanager
def local_services(
    settings: Settings,
    spec_file: str,
    *,
    environment_processes: int = 1,
    actor_processes: int = 1,
    archive_dir: str | None = None,
    log_dir: str | None = None,
    learners: Sequence[list[str]] = (),
    gateway_port: int | None = None,
    gateway_args: Sequence[str] = (),
    actor_implementations: Sequence[str] = (),
) -> Iterator[Services]:
    """Run the orchestrator, environment and actor services (and the logger, when an
    archive folder is given, a learner per entry of ``learners``: its ``trialog serve
    learner`` arguments, and the web gateway on ``gateway_port`` with ``gateway_args`` when given) as child
    processes; wait until each reports ready. The actor services host ``actor_implementations``
    when given, else every one of the spec: each hosted implementation is a consumer group
    reading every record (docs/performance.md, "The consumer layout"), so a run that plays
    few of a spec's implementations should host only those."""
    log_dir = log_dir or tempfile.mkdtemp(prefix="trialog-services-")
    commands: list[tuple[str, list[str]]] = [("orchestrator", ["orchestrator"])]
    commands += [(f"environment-{i}", ["environment"]) for i in range(environment_processes)]
    hosted = [arg for impl in actor_implementations for arg in ("--implementation", impl)]
    commands += [(f"actors-{i}", ["actors", *hosted]) for i in range(actor_processes)]
    if archive_dir:
        commands.append(("logger", ["logger", "--archive-dir", archive_dir]))
    commands += [(f"learner-{i}", ["learner", *args]) for i, args in enumerate(learners)]
    if gateway_port is not None:
        commands.append(("gateway", ["gateway", "--port", str(gateway_port), *gateway_args]))
    procs = Services()
    ports = procs.ports
    try:
        for name, args in commands:
            procs[name], ports[name] = start_service(settings, spec_file, args, Path(log_dir) / f"{name}.log")
        wait_ready(procs, ports, log_dir)
        yield procs
    finally:
        stop_services(procs.values())


def stop_services(procs) -> None:
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def wait_ready(
    procs: dict[str, subprocess.Popen], ports: dict[str, int], log_dir: str | Path, timeout: float = 90
) -> None:
    deadline = time.monotonic() + timeout
    pending = dict(ports)
    while pending:
        for name, port in list(pending.items()):
            proc = procs[name]
            if proc.poll() is not None:
                tail = (Path(log_dir) / f"{name}.log").read_text(errors="replace")[-2000:]
                raise TrialogError(f"service {name} exited with code {proc.returncode} while starting:\n{tail}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
                    if response.status == 200:
                        del pending[name]
            except OSError:
                pass
        if time.monotonic() > deadline:
            raise TrialogError(f"services not ready after {timeout:.0f} s: {', '.join(pending)} (logs in {log_dir})")
        time.sleep(0.2)


_last_line = 0.0


def _progress(done: int, running: int, total: int, tps: float) -> None:
    """A bar redrawn in place on a terminal; a line every 5 s (and at the end) in a log."""
    global _last_line
    width = 30
    filled = int(width * done / total) if total else width
    text = f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} done, {running} running, {tps:,.0f} ticks/s"
    if sys.stderr.isatty():
        print(f"\r{text} ", end="", file=sys.stderr, flush=True)
    elif done == total or time.monotonic() - _last_line >= 5:
        _last_line = time.monotonic()
        print(text, file=sys.stderr, flush=True)


def pairing(spec: Spec, implementations: dict[str, str]) -> str:
    """A campaign row label: the implementation of each actor, in the spec's order."""
    return " + ".join(implementations.get(a.name, a.implementation) for a in spec.trial.actors)


async def campaign(
    settings: Settings, spec: Spec, trials: int, concurrency: int, overrides_for, *, quiet: bool = False
):
    from trialog.bus import connect
    from trialog.controller import Controller, run_campaign
    from trialog.protocol.topics import TRIALS

    # The ends, and the returns they carry, from the trials index: following `events` this process
    # would fetch every record of every trial and check each reward again after the orchestrator.
    async with Controller(connect(settings), name="campaign", follow=TRIALS) as ctl:
        result = await run_campaign(
            ctl, spec.name, trials, concurrency, overrides=overrides_for, on_progress=None if quiet else _progress
        )
        returns = {o.trial_id: ctl.returns(o.trial_id) for o in result.outcomes if o.trial_id}
    if not quiet and sys.stderr.isatty():
        print(file=sys.stderr)
    return result, returns


def summary_table(spec: Spec, result, returns: dict[str, dict[str, float]]) -> str:
    rows: dict[str, list[tuple[dict[str, float], int]]] = defaultdict(list)
    for o in result.outcomes:
        label = pairing(spec, o.overrides.get("implementations", {}))
        rows[label].append((returns.get(o.trial_id, {}), o.ticks))
    actors = [a.name for a in spec.trial.actors]
    lines = [
        f"{'pairing':34} {'trials':>6} {'ticks':>7} "
        + " ".join(f"{'return ' + a:>16}" for a in actors)
        + f" {'total':>9}"
    ]
    for label, items in sorted(rows.items()):
        n = len(items)
        means = {a: sum(r.get(a, 0.0) for r, _ in items) / n for a in actors}
        ticks = sum(t for _, t in items) / n
        lines.append(
            f"{label:34} {n:>6} {ticks:>7.1f} "
            + " ".join(f"{means[a]:>16.2f}" for a in actors)
            + f" {sum(means.values()):>9.2f}"
        )
    reasons = ", ".join(f"{k}: {v}" for k, v in sorted(result.by_reason().items()))
    failed = [o for o in result.outcomes if o.failed]
    lines.append("")
    lines.append(
        f"{len(result.outcomes)} trials in {result.seconds:.1f} s — "
        f"{result.ticks} ticks ({result.ticks / max(result.seconds, 1e-9):,.0f} ticks/s) — end reasons: {reasons}"
    )
    for o in failed[:5]:
        lines.append(f"  {o.trial_id or '(no id)'}: {o.error or 'ended by an error'}")
    return "\n".join(lines)


def plot_campaign(spec: Spec, result, returns: dict[str, dict[str, float]], out: str):
    """The campaign's returns per trial, one series per pairing (PNG + data beside it)."""
    from trialog.tools.plot import TrialReturn, plot_returns

    trials = [
        TrialReturn(
            o.trial_id,
            pairing(spec, o.overrides.get("implementations", {})),
            returns[o.trial_id],
            o.ticks * len(spec.trial.actors),
        )
        for o in result.outcomes
        if o.trial_id in returns
    ]
    return plot_returns(trials, out, title=f"{spec.name}: return per trial (sum over actors), by pairing")


def campaign_overrides(
    base: dict[str, Any], pairings: list[dict[str, str]] | None = None
) -> Callable[[int], dict[str, Any]]:
    """The overrides of the campaign's trial i: ``seed`` N gives trial i seed N+i (without
    one, each trial's seed is the spec's, else derived from its ID); pairings take turns."""
    base = dict(base)
    seed_base = base.pop("seed", None)

    def overrides_for(i: int) -> dict[str, Any]:
        extra = dict(base) if seed_base is None else dict(base, seed=seed_base + i)
        if pairings:
            extra["implementations"] = {**pairings[i % len(pairings)], **base.get("implementations", {})}
        return extra

    return overrides_for


def wait_archived(archive_dir: str, trial_ids: list[str], timeout: float = 90) -> None:
    """Keep the logger running until it has archived the campaign's trials (it waits a
    grace period after each end for late rewards)."""
    from trialog.datalog.archive import Archive

    archive = Archive(archive_dir)
    deadline = time.monotonic() + timeout
    print(f"waiting for the logger to archive {len(trial_ids)} trials…", file=sys.stderr)
    while True:
        archive.refresh()
        missing = [t for t in trial_ids if archive.entry(t) is None]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise TrialogError(
                f"the logger did not archive {len(missing)} trial(s) within {timeout:.0f} s, e.g. {missing[0]}"
            )
        time.sleep(0.5)


async def create_topics(settings: Settings, local_instances: int | None = None) -> None:
    """The deployment's topics; a local run names its largest service's instances, one partition
    each unless the settings give a count (each partition a service reads costs it per request)."""
    from trialog.bus import connect

    await connect(settings).create_topics(local_instances)


async def wait_indexed(bus: Bus, trial_ids: list[str], timeout: float = 30) -> bool:
    """Keep the orchestrator running until the ``trials`` index says these trials ended.
    It indexes a ``trial.ended`` once it reads it back, a moment after the campaign saw it:
    stopped before then, it would leave them ``running`` in ``trialog trial list`` until it
    next runs. Past ``timeout`` it says so and returns False, and the services stop anyway
    (nothing is lost: the orchestrator resumes before that record)."""
    from trialog.controller import Controller

    wanted, index = set(trial_ids), Controller(bus)
    deadline = time.monotonic() + timeout
    while True:
        wanted -= {r.trial_id for r in await index.list_trials() if r.status == "ended"}
        if not wanted:
            return True
        if time.monotonic() > deadline:
            print(f"the trials index does not yet say that {len(wanted)} trial(s) ended, e.g. {min(wanted)}; "
                  "the orchestrator indexes them when it next runs", file=sys.stderr)  # fmt: skip
            return False
        await asyncio.sleep(0.2)
