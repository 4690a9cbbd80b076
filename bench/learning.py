"""Learning benchmark: DQN and PPO on CartPole-v1 and TD3 on Pendulum-v1 through Trialog vs
in-process, and behaviour cloning on Overcooked from the planner's demonstrations.

    python bench/learning.py [--out DIR] [--json PATH] [--short] [--only dqn|ppo|td3|bc] [--pairs N]

**DQN.** The same preset (presets/dqn_cartpole.py: algorithm, hyperparameters, schedule)
run two ways: through Trialog — ``trialog train``'s phases with the orchestrator,
environment, actor and learner services as separate processes — and in-process
(``trialog train --in-process``, :func:`trialog.learn.in_process.train_in_process`), once
per network seed, each with its own trial seeds. Trialog runs first. Every run follows
the same schedule, so the k-th evaluation of each comes after the same stretch of
training (at env steps within a trial's length of each other: evaluations fall where
trials end). Printed and plotted: the mean evaluation return per env step of Trialog
and the seeds' min, median and max (each seed's curve in the JSON), and how many of Trialog's
evaluations lie within the seeds' min–max at the same evaluation. Checked: that Trialog's final
evaluation reaches 475, and that its curve leaves the spread no more often than the in-process
seeds' own curves do (:func:`outside_counts`): each of the eleven runs is counted against the
min–max of the ten others, and Trialog fails if its count is higher than every seed's. A run
drawn as the seeds are fails that with probability at most 1/11. "Every evaluation within the
seeds' min–max", the rule before, failed 51 of the 100 in-process seeds of the stored figures
(docs/learning/figures.json) held against their nine peers: it rejected the in-process algorithm
itself (docs/learning.md, "The curve rule, calibrated").

**PPO.** presets/ppo_cartpole.py through Trialog, then in-process, ``--pairs`` times in turn
(3 by default; each pair on topics of its own): the machine's drift between runs falls on both
modes alike. Printed per pair: each mode's wall clock (``wall_s``: the schedule's, the services'
start-up left out) and their ratio, the CPU each mode's processes took (this process and, through
Trialog, the services it started; start-up included), the broker's CPU when it is the one
``trialog broker start`` runs on this machine, and through Trialog the
share of its transitions the learner discarded; then the pairs' median ratio. Checked: that every
run through Trialog reached 475 at an evaluation (the preset's rule) and discarded at most 5 % of
its transitions. The wall clock bar (≤ 3×) is printed beside the ratios, not checked: a figure of
the machine as much as of Trialog.

**TD3.** presets/td3_pendulum.py (continuous actions, Pendulum-v1) through Trialog, then
in-process with the preset's seeds; checked: that the final mean evaluation return of each
mode reaches the preset's threshold (−250). One run each: no spread.

**BC.** Planner+planner trials make the demonstrations; ``trialog export`` writes them;
:mod:`trialog.learn.bc` clones the planner and publishes the model; then trials of
BC+planner and of random+planner with the same seeds. Printed: the mean total return
(soups delivered) of each.

It is a benchmark, not a test: the full run takes tens of minutes on 2 cores. ``--short``
(what CI runs) checks that every part works end to end in a few minutes, without the
figures' claims. Each run uses a fresh topic prefix on the broker of
``TRIALOG_BOOTSTRAP_SERVERS``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # runnable as `python bench/learning.py` from anywhere

from bench.cpu import cpu_seconds  # noqa: E402
from trialog.learn.in_process import train_in_process  # noqa: E402
from trialog.learn.report import plot, table  # noqa: E402
from trialog.learn.through_log import train  # noqa: E402
from trialog.learn.train import load_preset  # noqa: E402
from trialog.settings import Settings  # noqa: E402
from trialog.spec import load_spec  # noqa: E402
from trialog.tools.campaign import campaign, create_topics, local_services  # noqa: E402

THRESHOLD = 475.0


def spread_at(curves: list[list[tuple[int, float]]], index: int) -> tuple[float, float] | None:
    """Min and max over seeds of each seed's evaluation number ``index`` (the same point of the
    schedule in every run); None when no seed has that many."""
    values = [curve[index][1] for curve in curves if index < len(curve)]
    return (min(values), max(values)) if values else None


def outside_counts(runs: dict[str, list[tuple[int, float]]]) -> dict[str, int]:
    """For each run, at how many of its evaluations its return lies outside the min–max of the
    other runs' evaluation of the same number (where any other run has one)."""
    counts = {}
    for name, curve in runs.items():
        others = [c for other, c in runs.items() if other != name]
        spreads = (spread_at(others, i) for i in range(len(curve)))
        counts[name] = sum(1 for (_, r), sp in zip(curve, spreads) if sp is not None and not sp[0] <= r <= sp[1])
    return counts


def like_the_seeds(trialog_outside: int, seeds_outside: list[int]) -> bool:
    """The curve rule: Trialog's curve leaves the others' spread no more often than some
    in-process seed's does (under the hypothesis that it is one more such run, it is the
    strictly worst of the runs with probability at most one in their number)."""
    return bool(seeds_outside) and trialog_outside <= max(seeds_outside)


def spread_series(curves: dict[int, list[tuple[int, float]]]) -> dict[str, list[tuple[int, float]]]:
    """The in-process seeds as three lines (min, median, max at each evaluation, drawn at the
    seeds' median env steps): ten seeds' own lines would hide Trialog's; each seed's curve is in
    the figures' JSON."""
    first, last = min(curves), max(curves)
    lines: dict[str, list[tuple[int, float]]] = {"max": [], "median": [], "min": []}
    for i in range(max(len(c) for c in curves.values())):
        at = [c[i] for c in curves.values() if i < len(c)]
        step, values = int(np.median([s for s, _ in at])), sorted(r for _, r in at)
        lines["max"].append((step, values[-1]))
        lines["median"].append((step, float(np.median(values))))
        lines["min"].append((step, values[0]))
    return {f"in-process, seeds {first}–{last}: {k}": v for k, v in lines.items()}


def dqn(
    settings: Settings, out: Path, seeds: list[int], total_steps: int, short: bool, concurrency: int | None = None
) -> dict:
    preset = load_preset(ROOT / "presets" / "dqn_cartpole.py")
    schedule = dataclasses.replace(
        preset.schedule,
        total_steps=total_steps,
        steps_between_evaluations=min(preset.schedule.steps_between_evaluations, total_steps // 2),
        concurrency=preset.schedule.concurrency if concurrency is None else concurrency,
    )
    preset = dataclasses.replace(preset, schedule=schedule)
    result = train(settings, preset, out / "dqn-trialog", quiet=short)
    print(table(preset, result))
    trialog_curve = [(e.env_steps, e.mean_return) for e in result.evaluations]
    # Each in-process run: the same preset with another network seed and its own trial seeds.
    curves, seconds = {}, {}
    for seed in seeds:
        seeded = dataclasses.replace(preset, agent={**preset.agent, "seed": seed}, seed=seed * 100_000)
        run = train_in_process(seeded, out / f"dqn-in-process-{seed}", quiet=True)
        curves[seed] = [(e.env_steps, e.mean_return) for e in run.evaluations]
        seconds[seed] = run.seconds
        final = curves[seed][-1][1]
        print(f"dqn in-process seed {seed}: final eval {final:.1f} ({run.seconds:.0f} s)", file=sys.stderr)
    spreads = [spread_at(list(curves.values()), i) for i in range(len(trialog_curve))]
    within = [sp is not None and sp[0] <= r <= sp[1] for (_, r), sp in zip(trialog_curve, spreads)]
    outside = outside_counts({"trialog": trialog_curve, **{str(s): c for s, c in curves.items()}})
    seeds_outside = {s: n for s, n in outside.items() if s != "trialog"}
    files = plot(preset, result, out / "dqn_cartpole.png", extra=spread_series(curves))
    final_in_process = [c[-1][1] for c in curves.values()]
    return {
        "in_process": {str(s): c for s, c in curves.items()},
        "trialog": trialog_curve,
        "trialog_final": trialog_curve[-1][1] if trialog_curve else None,
        "trialog_best": max((r for _, r in trialog_curve), default=None),
        "in_process_best": {str(s): max(r for _, r in c) for s, c in curves.items()},
        "in_process_final_mean": sum(final_in_process) / len(final_in_process),
        "evaluations_within_spread": f"{sum(within)}/{len(within)}",
        # Coach's rule: the threshold is reached at some evaluation (the preset's validation);
        # the bar here is stricter: the final evaluation too, and a curve like the seeds' curves.
        "reached_threshold": any(r >= THRESHOLD for _, r in trialog_curve),
        "final_reached_threshold": bool(trialog_curve) and trialog_curve[-1][1] >= THRESHOLD,
        "all_within_spread": bool(within) and all(within),
        "outside_others": outside["trialog"],  # evaluations outside the ten seeds' min–max
        "seeds_outside_others": seeds_outside,  # each seed's, against the nine others and Trialog
        "curve_like_seeds": like_the_seeds(outside["trialog"], list(seeds_outside.values())),
        "trialog_seconds": result.seconds,
        "in_process_seconds": {str(s): t for s, t in seconds.items()},
        "plot": str(files.png),
    }


PPO_SHORT_STEPS = 6_000  # --short: a few versions and two evaluations (no claims)
PPO_WALL_BAR = 3.0  # #26: through the log within 3x the in-process wall clock
PPO_DISCARDED_BAR = 0.05  # and at most 5 % of the transitions discarded


def _run_figures(result) -> dict:
    """What the PPO and TD3 parts record of any one run: its evaluations, final and best, time, steps, version."""
    curve = [(e.env_steps, e.mean_return) for e in result.evaluations]
    return {
        "evaluations": curve,
        "final": curve[-1][1] if curve else None,
        "best": max((r for _, r in curve), default=None),
        "seconds": result.seconds,
        "env_steps": result.env_steps,
        "model_version": result.model_version,
    }


def _cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended and been waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _broker_pid(settings: Settings) -> int | None:
    """The broker's pid if it is the one ``trialog broker start`` runs on this machine for these
    settings (its CPU is part of what the log costs); None for any other broker."""
    from trialog.broker.process import status

    found = status()
    return found.pid if found.running and found.bootstrap == settings.bootstrap_servers else None


def ppo(settings: Settings, out: Path, pairs: int, short: bool) -> dict:
    """The PPO preset through Trialog, then in-process, ``pairs`` times in turn; each pair's figures
    and the pairs' median wall clock ratio."""
    preset = load_preset(ROOT / "presets" / "ppo_cartpole.py")
    if short:
        schedule = dataclasses.replace(
            preset.schedule, total_steps=PPO_SHORT_STEPS, steps_between_evaluations=PPO_SHORT_STEPS // 2
        )
        preset = dataclasses.replace(preset, schedule=schedule)
    broker = _broker_pid(settings)  # its CPU is counted around the runs through the log
    runs = []
    for i in range(1, pairs + 1):
        # Topics and a model store of its own: a run refuses topics an earlier run left a model on.
        own = dataclasses.replace(settings, topic_prefix=f"{settings.topic_prefix}ppo{i}.", model_store="")
        pair = {}
        for mode, run in (
            ("trialog", functools.partial(train, own, preset, out / f"ppo-trialog-{i}", quiet=True)),
            ("in_process", functools.partial(train_in_process, preset, out / f"ppo-in-process-{i}", quiet=True)),
        ):
            measured = broker if mode == "trialog" else None  # None: not measured (a broker elsewhere)
            cpu, broker_cpu = _cpu_seconds(), cpu_seconds(measured) if measured else 0.0
            result = run()
            figures = _run_figures(result)
            pair[mode] = {
                **figures,
                "cpu_seconds": _cpu_seconds() - cpu,
                "broker_cpu_seconds": cpu_seconds(measured) - broker_cpu if measured else None,
                "reached_threshold": any(r >= THRESHOLD for _, r in figures["evaluations"]),
                "discarded": result.discarded,
                "discarded_share": (result.discarded or 0) / result.env_steps if result.env_steps else None,
            }
        t, p = pair["trialog"], pair["in_process"]
        pair["wall_clock_ratio"] = t["seconds"] / p["seconds"]
        pair["cpu_ratio"] = t["cpu_seconds"] / p["cpu_seconds"]
        broker_part = "" if t["broker_cpu_seconds"] is None else f", the broker {t['broker_cpu_seconds']:.0f} s more"
        print(
            f"PPO CartPole-v1 pair {i}: through Trialog {t['seconds']:.1f} s, in-process {p['seconds']:.1f} s "
            f"({pair['wall_clock_ratio']:.2f}x; bar {PPO_WALL_BAR:.0f}x); CPU {t['cpu_seconds']:.0f} s and "
            f"{p['cpu_seconds']:.0f} s ({pair['cpu_ratio']:.2f}x{broker_part}); through Trialog best eval {t['best']}, "
            f"final {t['final']}, discarded {t['discarded']} of {t['env_steps']:,} transitions",
            flush=True,
        )
        runs.append(pair)
    ratios = [r["wall_clock_ratio"] for r in runs]
    median = statistics.median(ratios)
    verdict = (
        "a short run: no claim"
        if short
        else f"{'met' if median <= PPO_WALL_BAR else 'NOT met'} by the median, "
        f"by {sum(r <= PPO_WALL_BAR for r in ratios)} of {pairs} pairs"
    )
    print(
        f"PPO CartPole-v1: wall clock through Trialog / in-process, median of {pairs} pair(s) {median:.2f}x "
        f"(pairs {', '.join(f'{r:.2f}' for r in ratios)}; bar {PPO_WALL_BAR:.0f}x: {verdict})"
    )
    return {"pairs": runs, "median_wall_clock_ratio": median, "total_steps": preset.schedule.total_steps}


TD3_SHORT_STEPS = 2_000  # --short: the heatup (1,000 steps) and five rounds of training


def td3(settings: Settings, out: Path, short: bool) -> dict:
    """The TD3 preset through Trialog, then in-process; each mode's final evaluation against the
    preset's threshold. Short: the same schedule over 2,000 steps, one evaluation (no claims)."""
    preset = load_preset(ROOT / "presets" / "td3_pendulum.py")
    threshold = preset.validation.min_reward_threshold
    if short:
        schedule = dataclasses.replace(
            preset.schedule, total_steps=TD3_SHORT_STEPS, steps_between_evaluations=TD3_SHORT_STEPS
        )
        preset = dataclasses.replace(preset, schedule=schedule)
    figures: dict = {"threshold": threshold, "total_steps": preset.schedule.total_steps}
    for mode, run in (
        ("trialog", lambda: train(settings, preset, out / "td3-trialog", quiet=short)),
        ("in_process", lambda: train_in_process(preset, out / "td3-in-process", quiet=True)),
    ):
        result = run()
        figures[mode] = _run_figures(result)
        final = figures[mode]["final"]
        figures[mode]["final_reached_threshold"] = final is not None and final >= threshold
        if mode == "trialog":
            print(table(preset, result))
    t, i = figures["trialog"], figures["in_process"]
    figures["wall_clock_ratio"] = t["seconds"] / i["seconds"] if i["seconds"] else None
    print(
        f"TD3 Pendulum-v1 ({preset.schedule.total_steps:,} steps): final eval through Trialog {t['final']}, "
        f"in-process {i['final']} (threshold {threshold}); wall clock {t['seconds']:.0f} s and "
        f"{i['seconds']:.0f} s ({figures['wall_clock_ratio'] or 0:.1f}x)"
    )
    return figures


def behaviour_cloning(
    settings: Settings, out: Path, demo_trials: int, eval_trials: int, max_ticks: int, epochs: int
) -> dict:
    asyncio.run(create_topics(settings))  # run alone (--only bc), nothing else has made them
    spec_file = ROOT / "examples" / "overcooked" / "spec.yaml"
    spec = load_spec(spec_file)
    work = out / "bc-overcooked"
    (work / "logs").mkdir(parents=True, exist_ok=True)
    demos = work / "planner-demos.parquet"
    with local_services(settings, str(spec_file), log_dir=str(work / "logs")):
        t0 = time.monotonic()
        asyncio.run(
            campaign(
                settings,
                spec,
                demo_trials,
                8,
                lambda i: {"seed": i, "max_ticks": max_ticks, "experiment": "bc-overcooked-demos"},
                quiet=True,
            )
        )
        env = {**_env(settings)}
        subprocess.run(
            [sys.executable, "-m", "trialog.cli", "export", "--implementation", "planner", "--out", str(demos)],
            env=env,
            check=True,
        )
        trained = subprocess.run(
            [sys.executable, "-m", "trialog.learn.bc", "--demos", str(demos), "--implementation", "planner",
             "--model", "overcooked-bc", "--epochs", str(epochs), "--publish"],
            env=env, check=True, capture_output=True, text=True,
        )  # fmt: skip
        print(trained.stdout, end="", file=sys.stderr)
        actions = int(trained.stdout.split()[0])  # "<n> demonstrations, ..."
        version = int(trained.stdout.rsplit(" v", 1)[1])  # "published overcooked-bc v<n>"
        time.sleep(3)  # the actor service loads it from `models`
        returns = {}
        for partner in ("bc", "random"):
            result, rets = asyncio.run(
                campaign(
                    settings,
                    spec,
                    eval_trials,
                    8,
                    lambda i, p=partner: {
                        "seed": 1_000 + i,
                        "max_ticks": max_ticks,
                        "implementations": {"cook_a": p},
                        "experiment": "bc-overcooked",
                        "phase": "evaluate",
                    },
                    quiet=True,
                )
            )
            totals = [sum(r.values()) for r in rets.values()]
            returns[partner] = sum(totals) / len(totals)
        seconds = time.monotonic() - t0
    print(
        f"BC on Overcooked: {actions} planner demonstrations from {demo_trials} trials, model v{version}; "
        f"mean total return over {eval_trials} trials of {max_ticks} ticks: "
        f"bc+planner {returns['bc']:.1f}, random+planner {returns['random']:.1f}"
    )
    return {
        "demonstrations": actions,
        "demo_trials": demo_trials,
        "eval_trials": eval_trials,
        "max_ticks": max_ticks,
        "bc_plus_planner": returns["bc"],
        "random_plus_planner": returns["random"],
        "seconds": seconds,
    }


def _env(settings: Settings) -> dict[str, str]:
    from trialog.tools.campaign import _settings_env

    return _settings_env(settings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="", help="folder for plots, data and logs (default: a temporary folder)")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--short", action="store_true", help="a few minutes: every part end to end, no claims")
    parser.add_argument("--only", choices=("dqn", "ppo", "td3", "bc"))
    parser.add_argument(
        "--seeds",
        type=int,
        default=10,
        help="in-process DQN runs (seeds 1..N): their min–max at each step is the spread",
    )
    parser.add_argument("--total-steps", type=int, default=50_000)
    parser.add_argument("--concurrency", type=int, help="DQN trials at once through Trialog (default: the preset's)")
    parser.add_argument(
        "--pairs", type=int, default=3, help="PPO runs through Trialog and in-process, in turn (default 3)"
    )
    args = parser.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="trialog-bench-learning-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # BC's weights (1.2 MB) are larger than a record may be: they go by reference to this store.
    settings = Settings.load(
        {"topic_prefix": f"bench-learning-{uuid.uuid4().hex[:8]}.", "model_store": str(out / "models")}
    )
    figures: dict = {"short": args.short}
    if args.only in (None, "dqn"):
        if args.short:
            figures["dqn"] = dqn(settings, out, [1, 2], 3_000, True)
        else:
            figures["dqn"] = dqn(
                settings, out, list(range(1, args.seeds + 1)), args.total_steps, False, args.concurrency
            )
        d = figures["dqn"]
        print(
            f"DQN CartPole-v1: through Trialog best eval {d['trialog_best']}, final {d['trialog_final']}; "
            f"in-process mean final {d['in_process_final_mean']:.1f}, "
            f"best per seed {d['in_process_best']}; "
            f"Trialog evaluations within the in-process spread: {d['evaluations_within_spread']}; "
            f"outside the other runs' spread: Trialog at {d['outside_others']}, the seeds at "
            f"{min(d['seeds_outside_others'].values())}–{max(d['seeds_outside_others'].values())}; plot {d['plot']}"
        )
    if args.only in (None, "ppo"):
        figures["ppo"] = ppo(settings, out, 1 if args.short else args.pairs, args.short)
    if args.only in (None, "td3"):
        figures["td3"] = td3(settings, out, args.short)
    if args.only in (None, "bc"):
        figures["bc"] = behaviour_cloning(settings, out, *((4, 4, 60, 5) if args.short else (24, 16, 200, 40)))
    if args.short:
        print(
            "(short run: every part end to end, too little training to compare; "
            "the claims are the full run's, docs/learning.md)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    failed = []
    if not args.short and "dqn" in figures:
        d = figures["dqn"]
        if not d["final_reached_threshold"]:
            failed.append(f"DQN through Trialog: final evaluation {d['trialog_final']} below {THRESHOLD}")
        if not d["curve_like_seeds"]:
            failed.append(
                f"DQN through Trialog: {d['outside_others']} evaluations outside the other runs' spread, more than "
                f"any in-process seed's (at most {max(d['seeds_outside_others'].values())})"
            )
    if not args.short and "ppo" in figures:
        for i, pair in enumerate(figures["ppo"]["pairs"], 1):
            t = pair["trialog"]
            if not t["reached_threshold"]:
                failed.append(f"PPO through Trialog, pair {i}: no evaluation reached {THRESHOLD} (best {t['best']})")
            if t["discarded_share"] is None or t["discarded_share"] > PPO_DISCARDED_BAR:
                failed.append(
                    f"PPO through Trialog, pair {i}: {t['discarded']} of {t['env_steps']} transitions discarded"
                )
    if not args.short and "td3" in figures:
        for mode, name in (("trialog", "through Trialog"), ("in_process", "in-process")):
            d = figures["td3"][mode]
            if not d["final_reached_threshold"]:
                failed.append(f"TD3 {name}: final evaluation {d['final']} below {figures['td3']['threshold']}")
    if (
        not args.short
        and "bc" in figures
        and not figures["bc"]["bc_plus_planner"] > figures["bc"]["random_plus_planner"]
    ):
        failed.append("BC+planner did not beat random+planner")
    for line in failed:
        print(f"MISSED: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
