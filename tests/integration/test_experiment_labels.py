"""Experiment and phase labels travel from the start request to the log, the index and the datalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import deployment
from trialog.bus.kafka import KafkaBus
from trialog.datalog.replay import read_trial
from trialog.protocol.events import TrialStarted
from trialog.spec import load_spec

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent


async def test_experiment_and_phase_are_in_trial_started_and_the_index(kafka_settings):
    bus = KafkaBus(kafka_settings)
    spec = load_spec(HERE / "trialtest.yaml", bus.store)
    async with deployment(bus, [spec]) as (_, ctl):
        labelled = await ctl.start_trial(spec.name, seed=1, max_ticks=3, experiment="exp-1", phase="heatup")
        plain = await ctl.start_trial(spec.name, seed=2, max_ticks=3)
        for tid in (labelled, plain):
            await ctl.wait_ended(tid, timeout=60)
        started = (await ctl.wait_started(labelled), await ctl.wait_started(plain))
        assert isinstance(started[0], TrialStarted)
        assert (started[0].experiment, started[0].phase) == ("exp-1", "heatup")
        assert (started[1].experiment, started[1].phase) == ("", "")
        fold = await read_trial(bus, labelled)
        assert (fold.started.experiment, fold.started.phase) == ("exp-1", "heatup")
        assert fold.samples() and all(s.policy_version is None for s in fold.samples())  # scripted actors: no model
        records = {r.trial_id: r for r in await ctl.list_trials()}
        assert (records[labelled].experiment, records[labelled].phase) == ("exp-1", "heatup")
        assert (records[plain].experiment, records[plain].phase) == ("", "")
