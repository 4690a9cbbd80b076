"""The pre-trial hook of docs/environments.md ("Pre-trial hooks"), run as written there by
the orchestrator's resolution of a start request: it changes who plays and the
environment's config, and its exception rejects the trial with a reason naming it."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import orjson
import pytest
import yaml

from trialog.errors import TrialError
from trialog.protocol.events import StartRequest
from trialog.services.orchestrator.resolve import resolve
from trialog.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "environments.md"
RPS = ROOT / "examples" / "rps" / "spec.yaml"


@pytest.fixture(scope="module")
def spec():
    section = DOC.read_text().split("## Pre-trial hooks", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    (hooks_yaml,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    module = types.ModuleType("doc_hooks")
    exec(compile(code, str(DOC), "exec"), module.__dict__)
    sys.modules["doc_hooks"] = module
    raw = yaml.safe_load(RPS.read_text())
    documented = yaml.safe_load(hooks_yaml)["trial"]["pre_trial_hooks"]
    raw["trial"]["pre_trial_hooks"] = [f"doc_hooks:{path.partition(':')[2]}" for path in documented]
    yield parse_spec(raw, file=str(RPS), base_dir=RPS.parent)
    del sys.modules["doc_hooks"]


def _start(spec, **fields):
    return resolve(spec, StartRequest(trial_id="t-hooks-1", spec=spec.name, requested_by="test", **fields))


def test_a_hook_sets_up_the_trial_from_the_request(spec):
    plain = _start(spec)
    assert {a.name: a.implementation for a in plain.actors} == {"alice": "random", "bob": "counter"}
    evaluated = _start(spec, phase="evaluate")
    assert {a.name: a.implementation for a in evaluated.actors} == {"alice": "counter", "bob": "counter"}
    assert orjson.loads(_start(spec, phase="heatup").environment_config)["target_score"] == 2
    assert orjson.loads(plain.environment_config)["target_score"] == 5


def test_a_hook_that_raises_rejects_the_trial_naming_itself(spec):
    with pytest.raises(TrialError, match=r"pre-trial hook doc_hooks:by_phase refused the trial: ValueError: no trial"):
        _start(spec, max_ticks=500)
