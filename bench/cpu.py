"""CPU time per tick of each Trialog process, and the same beside an earlier version run at the same time.

    python bench/cpu.py [--against REV] [--trials N] [--ticks T] [--runs R] [--bootstrap-servers H:P]

Runs N trials of ``bench/trivial.yaml`` at once, T ticks each, R times, on the
orchestrator, environment and actor services as subprocesses (as ``bench/run.py``
does); reads each process's CPU time from ``/proc`` around every run and prints
microseconds of CPU per tick for each, with the run's ticks/s (medians of the runs).

On a shared or throttled machine, single benchmark runs move by a third from one
minute to the next. ``--against REV`` checks the git revision REV out into a
temporary worktree and measures both versions *at the same time*, each with its own
services and topics on the one broker, so that the machine's drift falls on both
alike; it then prints each process's ratio (this version / REV). Both versions must
have ``bench/trivial.yaml`` and the ``serve`` command's flags used here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROCESSES = ("orchestrator", "environment", "actors")
SPEC = "bench/trivial.yaml"
RESULT = "cpu-per-tick: "  # marks the child's result line among anything else it prints


# The folders at the top of a checkout that install inside the trialog package
# (pyproject.toml's package-dir): in the checkout they are found through the editable
# install, which maps them to *this* checkout's folders, not another tree's.
MAPPED = {"services": "services", "examples": "examples", "presets": "presets", "_schemas": "schemas"}


def _map_like_installed(tree: Path) -> None:
    """Make an earlier version's tree import its own services (and examples, presets,
    schemas) as trialog.<name>: a link inside its trialog/ folder, found on PYTHONPATH
    before the editable install's mapping to this checkout."""
    for inside, top in MAPPED.items():
        link = tree / "trialog" / inside
        if (tree / top).is_dir() and not link.exists():
            link.symlink_to(Path("..") / top, target_is_directory=True)


def _path_with(tree: Path) -> str:
    """PYTHONPATH with ``tree`` first (its trialog, not the installed one), keeping what the
    caller set (e.g. a profiler's hooks)."""
    return os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(tree: Path, bootstrap: str, trials: int, ticks: int, runs: int) -> list[dict]:
    """Per run: µs of CPU per tick of each process and ticks/s, for the version in ``tree``
    (imported from there: this function runs in a process started with ``tree`` first on
    its path)."""
    from trialog.bus import connect
    from trialog.controller import Controller
    from trialog.protocol.topics import TRIALS
    from trialog.settings import Settings
    from trialog.spec import load_spec

    prefix = f"cpu-{uuid.uuid4().hex[:8]}."
    settings = Settings.load({"bootstrap_servers": bootstrap, "partitions": 1, "topic_prefix": prefix}, environ={})
    bus = connect(settings)
    spec = load_spec(tree / SPEC, bus.store)
    await bus.create_topics()
    flags = [
        "--spec",
        SPEC,
        "--bootstrap-servers",
        bootstrap,
        "--topic-prefix",
        prefix,
        "--partitions",
        "1",
        "--health-port",
        "0",
    ]
    logs = Path(tempfile.mkdtemp(prefix="trialog-cpu-"))
    procs = {
        name: subprocess.Popen(  # noqa: ASYNC220 - started once, before anything is measured
            [sys.executable, "-m", "trialog.cli", "serve", name, *flags],
            cwd=tree, stdout=(logs / f"{name}.log").open("wb"), stderr=subprocess.STDOUT,
        )
        for name in PROCESSES
    }  # fmt: skip
    out = []
    try:
        async with Controller(bus, follow=TRIALS) as ctl:

            async def run(n: int, t: int) -> float:
                t0 = time.perf_counter()
                ids = await asyncio.gather(*(ctl.start_trial(spec.name, max_ticks=t) for _ in range(n)))
                ended = await asyncio.gather(*(ctl.wait_result(i, timeout=600) for i in ids))
                wrong = [e for e in ended if e.reason != "max_ticks" or e.tick != t]
                if wrong:
                    raise SystemExit(
                        f"{len(wrong)} of {n} trials did not run {t} ticks ({wrong[0].reason}); service logs in {logs}"
                    )
                return time.perf_counter() - t0

            await run(2, 20)  # the services' start and group joins
            await run(trials, max(10, ticks // 6))  # warm code paths and allocations
            for _ in range(runs):
                before = {name: cpu_seconds(p.pid) for name, p in procs.items()}
                own = time.process_time()
                seconds = await run(trials, ticks)
                total = trials * ticks
                row = {name: (cpu_seconds(p.pid) - before[name]) / total * 1e6 for name, p in procs.items()}
                row["controller"] = (time.process_time() - own) / total * 1e6
                row["ticks_per_s"] = total / seconds
                out.append(row)
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        try:
            await bus.delete_topics()
        except Exception:  # noqa: BLE001 - a leftover prefix costs disk, not correctness
            pass
    return out


def medians(rows: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def table(results: dict[str, list[dict]]) -> str:
    names = list(results)
    keys = [*PROCESSES, "controller"]
    med = {n: medians(rows) for n, rows in results.items()}
    head = ["process (µs CPU per tick)", *names] + ([f"{names[0]} / {names[1]}"] if len(names) == 2 else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in [*keys, "total", "ticks_per_s"]:
        values = [sum(m[p] for p in keys) if k == "total" else m[k] for m in med.values()]
        cells = [f"{v:.0f}" for v in values]
        if len(values) == 2:
            cells.append(f"{values[0] / values[1]:.2f}")
        lines.append(f"| {'ticks/s' if k == 'ticks_per_s' else k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", default=os.environ.get("TRIALOG_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    p.add_argument("--against", metavar="REV", help="a git revision to measure at the same time, e.g. HEAD~3")
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--ticks", type=int, default=300)
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--json", metavar="PATH", help="also write every run's figures as JSON")
    p.add_argument("--tree", type=Path, help=argparse.SUPPRESS)  # internal: measure the version in this tree
    args = p.parse_args(argv)
    for flag in ("trials", "ticks", "runs"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} must be at least 1")
    if args.tree is not None:  # one version's measurement (a child process): its runs as JSON
        try:  # the event loop every trialog command uses (older versions had no shared helper)
            import uvloop

            run = uvloop.run
        except ImportError:
            run = asyncio.run
        rows = run(measure(args.tree, args.bootstrap_servers, args.trials, args.ticks, args.runs))
        print(RESULT + json.dumps(rows), flush=True)
        return 0
    trees = {"this version": ROOT}
    worktree = None
    try:
        if args.against:
            worktree = Path(tempfile.mkdtemp(prefix="trialog-against-")) / "tree"
            try:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), args.against],
                    check=True,
                    capture_output=True,
                    text=True,
                )
            except subprocess.CalledProcessError as exc:
                p.error(f"cannot check out {args.against!r}: {exc.stderr.strip()}")
            _map_like_installed(worktree)
            trees[args.against] = worktree
        together = f", {' and '.join(trees)} at the same time" if worktree else ""
        print(f"{args.trials} trials x {args.ticks} ticks, {args.runs} runs{together}", flush=True)
        cmd = [
            "--bootstrap-servers",
            args.bootstrap_servers,
            "--trials",
            str(args.trials),
            "--ticks",
            str(args.ticks),
            "--runs",
            str(args.runs),
        ]
        children = {
            name: subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), *cmd, "--tree", str(tree)],
                # The tree first on the path: its trialog, not the installed one.
                cwd=tree, env={**os.environ, "PYTHONPATH": _path_with(tree)}, stdout=subprocess.PIPE, text=True,
            )
            for name, tree in trees.items()
        }  # fmt: skip
        results = {}
        for name, child in children.items():
            stdout, _ = child.communicate()
            if child.returncode != 0:
                print(f"measuring {name} failed (exit {child.returncode})", file=sys.stderr)
                return 1
            results[name] = json.loads(
                next(line for line in reversed(stdout.splitlines()) if line.startswith(RESULT))[len(RESULT) :]
            )
    finally:
        if worktree is not None:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], capture_output=True
            )
            shutil.rmtree(worktree.parent, ignore_errors=True)
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
