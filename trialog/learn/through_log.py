"""The phases through the log: heatup, then train ↔ evaluate, as trials the services play.

:func:`run_phases` starts the trials of a preset (:mod:`trialog.learn.train`) against services already
running — ``concurrency`` at a time, each labelled with the experiment and its phase — follows their
ends and returns in the ``trials`` index, and evaluates the version that has trained on every step
so far. :mod:`trialog.learn.in_process` is the same schedule in one process, no broker.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable

from trialog.learn import trained_on_every_step
from trialog.learn.curves import Curves
from trialog.learn.report import Progress
from trialog.learn.train import Evaluation, Preset, TrainResult, played_actors
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

        async def run_until(phase: str, target_steps: int) -> None:
            """Trials of ``phase``, ``concurrency`` at a time, until the steps reach the target."""
            running: set[asyncio.Task] = set()
            while (result.env_steps < target_steps and not stop) or running:
                while result.env_steps < target_steps and not stop and len(running) < s.concurrency:
                    running.add(asyncio.create_task(one(phase)))
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
            training = training or asyncio.create_task(run_until("train", start + s.total_steps))
            while not training.done() and (result.env_steps < until or result.env_steps >= start + s.total_steps):
                counted.clear()
                waiting = asyncio.create_task(counted.wait())
                await asyncio.wait({training, waiting}, return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
            if training.done():
                training.result()  # its error, if a trial of it failed to start
            return training.done()

        async def evaluate(version: int, steps: int, episodes: int) -> None:
            nonlocal stop
            await until_served(version)
            pin = version if pinning and version else None
            rets = [r for _, r in await asyncio.gather(*(one("evaluate", pin) for _ in range(s.evaluation_trials)))]
            e = Evaluation(steps, episodes, sum(rets) / len(rets), rets, version)
            result.evaluations.append(e)
            progress.evaluated(e, start + s.total_steps)
            if curves is not None:
                curves.evaluated(e)
            stop = preset.stop_when_valid and result.meets(preset.validation)

        version, stop, evaluating, training = 0, False, None, None
        # Asked for, and where a trial may pin the version its learning actors act with, an evaluation
        # runs beside training (its trials pinned to the version it evaluates).
        pinning = s.evaluate_beside_training and pins_allowed(spec, played)
        await run_until("heatup", start + s.heatup_steps)
        next_eval = start + s.steps_between_evaluations
        try:
            # Every run ends with an evaluation, even one whose heatup (its trials in flight finishing) ate the budget.
            while not stop:
                last = await stretch(next_eval)
                if evaluating is not None:
                    await evaluating  # one evaluation at a time, in order; the next one's version chosen after it
                    evaluating = None
                    if not last and result.env_steps >= start + s.total_steps:
                        last = await stretch(next_eval)  # the budget's trials ended meanwhile: this one is the last
                if stop:
                    break  # an evaluation met the rule
                steps, episodes = result.env_steps, result.episodes
                next_eval = steps + s.steps_between_evaluations
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
                evaluating = asyncio.create_task(evaluate(version, steps, episodes))
                if last or not pinning:  # nothing to train beside it, or no pin to evaluate with
                    await evaluating
                    evaluating = None
                if last:
                    break
            for task in (evaluating, training):  # stopped at a valid evaluation: the trials in flight finish
                if task is not None:
                    await task
        finally:
            for task in (evaluating, training):
                if task is not None and not task.done():
                    task.cancel()
        result.model_version, _ = await latest_version()  # and the learner's discarded count
    progress.done()
    result.seconds = time.monotonic() - started
    result.valid = result.meets(preset.validation) if preset.validation else None
    return result
