"""``trialog train PRESET`` through the log: the services, a learner, and the phases as trials they play.

:func:`train` creates the topics, starts the spec's services and a learner as local processes, and
runs the preset (:mod:`trialog.learn.train`); :func:`run_phases` is its heatup, then train ↔ evaluate,
against services already running — ``concurrency`` trials at a time, each labelled with the experiment
and its phase — following their ends and returns in the ``trials`` index and evaluating the version
that has trained on every step so far. :mod:`trialog.learn.in_process` is the same schedule in one
process, no broker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

from trialog.errors import TrialogError
from trialog.learn import trained_on_every_step
from trialog.learn.curves import Curves, learner_dir
from trialog.learn.report import Progress, write_summary
from trialog.learn.train import (
    Evaluation,
    Preset,
    TrainResult,
    derived_spec,
    hosted_implementations,
    judging,
    learner_for,
    people_seated,
    played_actors,
)
from trialog.runtime.process import run_async
from trialog.settings import Settings

SERVED_TIMEOUT_S = 10.0  # an evaluation waits this long at most for the actor services to load its version


async def run_phases(
    settings: Settings,
    preset: Preset,
    spec,
    *,
    quiet: bool = False,
    version_timeout: float = 120,
    curves: Curves | None = None,
    result: TrainResult | None = None,
    served: Callable[[], int] | None = None,
    settled: Callable[[], int] | None = None,
    learned_before: int = 0,
) -> TrainResult:
    """Heatup, then train ↔ evaluate until the budget, against services already running
    (``spec``: the loaded spec the orchestrator serves); the run's TensorBoard ``curves`` as it goes;
    a curriculum's stage goes on from the counters of the ``result`` before it. ``served`` says which
    version the actor services act with (local services: their ``trialog_model_version`` gauge), so
    an evaluation starts as soon as they act with the version it evaluates; ``settled`` the env steps the
    learner has taken in with no round owed (its ``trialog_learner_settled_steps`` gauge);
    ``learned_before``: the env steps the model resumed from had seen (its learner counts on from them)."""
    from trialog import model_registry
    from trialog.bus import connect
    from trialog.controller import Controller
    from trialog.protocol.topics import TRIALS
    from trialog.runtime.pinned import pinned_actors, pins_allowed
    from trialog.tools.person import until_ended

    s, result, progress = preset.schedule, result or TrainResult(), Progress(quiet)
    start = result.env_steps
    played = played_actors(preset, spec)
    learning = next(iter(played))  # the actor whose return the run follows: the first the preset plays
    recent: list[float] = []
    next_seed = preset.seed
    started = time.monotonic()

    # The trials' ends and returns from the `trials` index: following `events` would fetch and look at every
    # record of every trial, several per env step (it was an eighth of a run's CPU, the services' beside it).
    async with Controller(connect(settings), name=f"train.{preset.name}", follow=TRIALS) as ctl:

        async def latest_version(steps: int | None = None) -> tuple[int, bool]:
            """The newest version, and whether it has trained on the first ``steps`` (default: every step
            so far; a learner trains in rounds: ``next_round_at`` says when the next one is owed; or the
            learner says so)."""
            taken_in = await asyncio.to_thread(settled) if settled is not None else -1  # before the version
            v = (await model_registry.latest_versions(ctl.bus)).get(preset.model)
            if v is None:
                return 0, False
            result.discarded = v.meta.get("discarded", result.discarded)
            result.algorithm = v.algorithm
            steps = result.env_steps if steps is None else steps
            return v.version, trained_on_every_step(v.meta, taken_in, steps + learned_before)

        async def until_served(version: int) -> None:
            """Until the actor services act with ``version`` (they load it from `models`)."""
            if served is None:  # services elsewhere, no gauge to read: time for them to load it
                await asyncio.sleep(1.0)
                return
            deadline = time.monotonic() + SERVED_TIMEOUT_S
            while await asyncio.to_thread(served) < version:
                if time.monotonic() > deadline:
                    if not quiet:
                        print(f"{preset.name}: actor services not on v{version}; evaluating anyway", file=sys.stderr)
                    return
                await asyncio.sleep(0.02)

        async def one(phase: str, pin: int | None = None) -> tuple[int, float]:
            nonlocal next_seed
            seed, next_seed = next_seed, next_seed + 1
            setup = preset.trial_setup(played, seed)
            if pin is not None:  # the learning actors act with that version, whatever is newer
                implementations = setup.get("implementations", {})
                setup["actors"] = pinned_actors(spec, implementations, preset.implementation, f"{preset.model}@{pin}")
            tid = await ctl.start_trial(spec.name, seed=seed, **setup, experiment=preset.name, phase=phase)
            ending = asyncio.create_task(until_ended(ctl, spec, preset, tid, setup, seed=seed, quiet=quiet))
            try:
                await ctl.wait_started(tid)
            except BaseException:  # rejected: its error is the start's, once
                ending.cancel()
                raise
            ended = await ending
            return ended.tick, ended.returns.get(learning, 0.0)

        counted = asyncio.Event()  # set at each trial's end, once its steps are counted

        moved = asyncio.Event()  # set when the next evaluation's steps move on, or the run is to stop

        async def run_until(phase: str, target_steps: int, held: bool = False) -> None:
            """Trials of ``phase``, ``concurrency`` at a time, until the steps reach the target; ``held``:
            none starts past the next evaluation's steps (``next_eval``) until they move on, once the
            evaluation before them has its version — however slow the learner, every stretch is evaluated."""
            running: set[asyncio.Task] = set()
            while (result.env_steps < target_steps and not stop) or running:
                limit = min(target_steps, next_eval) if held else target_steps
                while result.env_steps < limit and not stop and len(running) < s.concurrency:
                    running.add(asyncio.create_task(one(phase)))
                if not running:  # held at the next evaluation's steps
                    moved.clear()
                    await moved.wait()
                    continue
                done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    ticks, ret = task.result()
                    result.env_steps += ticks
                    result.episodes += 1
                    recent.append(ret)
                    if curves is not None:
                        curves.trial_ended(result.env_steps, ret, version)
                counted.set()
                # in-flight trials still finish; no new ones once the target is reached
                progress.show(
                    phase,
                    result.env_steps,
                    start + s.total_steps,
                    recent,
                    result.evaluations[-1] if result.evaluations else None,
                    version,
                )

        async def stretch(until: int) -> bool:
            """Train until the steps reach ``until``; whether the budget is done (its trials ended).
            Evaluated beside training, the training trials go on through the evaluations: the trials
            in flight at a stretch's end count in the next one, none waits for the slowest to end."""
            nonlocal training
            if not pinning:
                await run_until("train", min(until, start + s.total_steps))
                return result.env_steps >= start + s.total_steps
            training = training or asyncio.create_task(run_until("train", start + s.total_steps, held=True))
            while (
                not training.done()
                and not stop
                and (result.env_steps < until or result.env_steps >= start + s.total_steps)
            ):
                counted.clear()
                waiting = asyncio.create_task(counted.wait())
                await asyncio.wait({training, waiting}, return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
            if training.done():
                training.result()  # its error, if a trial of it failed to start
            return training.done()

        async def evaluate(version: int, steps: int, episodes: int, before: asyncio.Task | None) -> None:
            """Evaluate ``version``; its result is recorded after ``before``'s (the evaluation before it,
            which may still be running: a stretch of training can end sooner than an evaluation)."""
            nonlocal stop
            await until_served(version)
            pin = version if pinning and version else None
            rets = [r for _, r in await asyncio.gather(*(one("evaluate", pin) for _ in range(s.evaluation_trials)))]
            if before is not None:
                await before
            e = Evaluation(steps, episodes, sum(rets) / len(rets), rets, version)
            result.evaluations.append(e)
            progress.evaluated(e, start + s.total_steps)
            if curves is not None:
                curves.evaluated(e)
            stop = stop or (preset.stop_when_valid and result.meets(preset.validation))
            if stop:
                moved.set()

        version, stop, training = 0, False, None
        evaluations: list[asyncio.Task] = []  # each awaits the one before it to record its result in order
        # Asked for, and where a trial may pin the version its learning actors act with, an evaluation
        # runs beside training (its trials pinned to the version it evaluates).
        pinning = s.evaluate_beside_training and pins_allowed(spec, played)
        await run_until("heatup", start + s.heatup_steps)
        next_eval = start + s.steps_between_evaluations
        try:
            # Every run ends with an evaluation, even one whose heatup (its trials in flight finishing) ate the budget.
            while True:
                if stop:
                    break  # an evaluation met the rule
                last = await stretch(next_eval)
                if stop:
                    break  # an evaluation beside that stretch met the rule
                steps, episodes = result.env_steps, result.episodes
                next_eval = steps + s.steps_between_evaluations
                moved.set()
                # Evaluate the version that has seen every step so far (the learner may lag a little).
                deadline = time.monotonic() + version_timeout
                # (or, for learners that do not say, until no newer version has come for a while).
                version, current = await latest_version(steps)
                quiet_since = read_at = time.monotonic()
                while (
                    not current
                    and time.monotonic() < deadline
                    and (version == 0 or time.monotonic() - quiet_since < 10)
                ):
                    await asyncio.sleep(0.1)  # the learner's gauge answers in a millisecond, the catalog in 0.1 s
                    if time.monotonic() - read_at < 0.5 and settled and await asyncio.to_thread(settled) < 0:
                        continue  # a round still owed, the learner says
                    read_at = time.monotonic()
                    newer, current = await latest_version(steps)
                    if newer != version:
                        version, quiet_since = newer, time.monotonic()
                # Beside the next stretch where it pins its version, and beside the evaluation before it if
                # that one still runs (every stretch gets its evaluation, as in-process); else awaited before
                # the next stretch starts.
                before = evaluations[-1] if evaluations else None
                evaluations.append(asyncio.create_task(evaluate(version, steps, episodes, before)))
                if not pinning:
                    await evaluations[-1]  # between stretches: the next one starts once it has ended
                if last:
                    break
            # The last evaluation (and, through it, every one before); stopped at a valid one, the trials in flight.
            for task in (*evaluations[-1:], training):
                if task is not None:
                    await task
        finally:
            for task in (*evaluations, training):
                if task is not None and not task.done():
                    task.cancel()
        result.model_version, _ = await latest_version()  # and the learner's discarded count
    progress.done()
    result.seconds = time.monotonic() - started
    result.valid = result.meets(preset.validation) if preset.validation else None
    return result


async def earlier_run(settings: Settings, preset: Preset, *, resume: bool) -> tuple[int, int]:
    """The version of the preset's model an earlier run left on these topics and its env steps, to train on
    from (``resume``; refused without: the learner would restore it, the run report it as its own); (0, 0)."""
    from trialog import model_registry
    from trialog.bus import connect

    async with connect(settings) as bus:
        newest = (await model_registry.latest_versions(bus)).get(preset.model)
    if newest is not None and not resume:
        raise TrialogError(
            f"model {preset.model!r} already has versions under topic prefix {settings.topic_prefix!r} "
            f"(the newest v{newest.version}, {newest.meta.get('env_steps', 0):,} env steps), which this run's "
            "learner would train on from. For a fresh run give another --topic-prefix (TRIALOG_TOPIC_PREFIX); "
            f"to train on from v{newest.version}, --resume."
        )
    return (newest.version, newest.meta.get("env_steps", 0)) if newest is not None else (0, 0)


def train(
    settings: Settings,
    preset: Preset,
    out_dir: Path,
    *,
    quiet: bool = False,
    tensorboard: Path | None = None,
    resume: bool = False,
) -> TrainResult:
    """Create the topics (an earlier run's model on them: :func:`earlier_run`), run the services and
    a learner locally, and the phases; write ``summary.json`` into ``out_dir`` and TensorBoard curves
    into ``tensorboard`` (default ``out_dir/tensorboard``; the learner's in its ``learner`` folder)."""
    from trialog.spec import load_spec
    from trialog.tools.campaign import create_topics, free_port, local_services
    from trialog.tools.judge import judge_processes

    out_dir.mkdir(parents=True, exist_ok=True)
    spec_file = derived_spec(preset, out_dir)
    spec = load_spec(spec_file)
    # What the learner service will build, built here first: a preset it cannot train fails now,
    # with the reason, rather than in a service's log while the trials wait.
    on_policy = bool(getattr(learner_for(preset, spec), "on_policy", False))
    settings = dataclasses.replace(settings, model_store=settings.model_store or str((out_dir / "models").resolve()))
    run_async(create_topics(settings, max(preset.environment_processes, preset.actor_processes)))
    resumed_from, learned_before = run_async(earlier_run(settings, preset, resume=resume))
    (out_dir / "logs").mkdir(exist_ok=True)
    tensorboard = tensorboard or out_dir / "tensorboard"
    for line in (
        f"training on from v{resumed_from} of {preset.model}, an earlier run's" if resumed_from else "",
        f"starting services and a learner for {preset.implementation} (logs in {out_dir / 'logs'})…",
        f"TensorBoard curves in {tensorboard}",
    ):
        if line and not quiet:
            print(f"{preset.name}: {line}", file=sys.stderr)
    judging(preset)  # a preset whose learner would learn from nothing fails now
    learner = ["--implementation", preset.implementation, "--experiment", preset.name]
    learner += [arg for sender in preset.learn_from for arg in ("--learn-from", sender)]
    people = people_seated(preset, spec)
    gateway_port = free_port() if preset.judges or people else None
    if people and settings.gateway_url == Settings().gateway_url:  # the join links: to the gateway started here
        settings = dataclasses.replace(settings, gateway_url=f"http://127.0.0.1:{gateway_port}")
    curves = Curves(tensorboard)
    try:
        with (
            local_services(
                settings,
                str(spec_file),
                environment_processes=preset.environment_processes,
                actor_processes=preset.actor_processes,
                log_dir=str(out_dir / "logs"),
                learners=[[*learner, "--tensorboard", str(learner_dir(tensorboard).resolve())]],
                gateway_port=gateway_port,
                actor_implementations=hosted_implementations(preset, spec),
            ) as services,
            judge_processes(preset.judges, preset.name, f"http://127.0.0.1:{gateway_port}", out_dir / "logs"),
        ):
            served = functools.partial(services.served_version, preset.implementation)
            settled = functools.partial(services.settled_steps, preset.implementation)
            more = {"served": served, "settled": settled, "learned_before": learned_before}
            result = run_async(preset.run(run_phases, settings, spec, quiet=quiet, curves=curves, **more))
    finally:
        curves.close()
    result.on_policy = on_policy
    result.resumed_from = resumed_from
    write_summary(out_dir, preset, result)
    return result
