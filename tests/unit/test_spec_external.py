"""Implementations served by a process of their own (``external: true``, any language)."""

from pathlib import Path

import pytest
import yaml

from trialog.bus.memory import MemoryBus
from trialog.errors import SpecError
from trialog.services.actors.main import loops_for as actor_loops
from trialog.services.environment.main import loops_for as environment_loops
from trialog.settings import Settings
from trialog.spec import parse_spec

RPS = Path(__file__).resolve().parents[2] / "examples" / "rps" / "spec.yaml"


def _rps(**actors):
    raw = yaml.safe_load(RPS.read_text())
    raw["actors"].update(actors)
    return raw


def test_external_actor_needs_no_entry_and_is_not_served_here():
    spec = parse_spec(_rps(go={"external": True, "classes": ["player"]}), base_dir=RPS.parent)
    assert spec.actors["go"].external and not spec.actors["go"].served_here
    assert spec.actors["random"].served_here and not spec.actors["human"].served_here
    bus = MemoryBus(Settings())
    served = sorted(loop.handler.implementation for loop in actor_loops(bus, spec))
    assert served == ["counter", "random"]  # neither the client nor the external one
    with pytest.raises(SpecError, match="external"):
        actor_loops(bus, spec, ["go"])


@pytest.mark.parametrize(
    ("impl", "message"),
    [
        ({"external": True, "entry": "a.b:C"}, "has no entry"),
        ({"external": True, "client": True}, "not both"),
        ({"external": "yes"}, "true or false"),
        ({"config": {}}, "external: true"),
    ],
)
def test_external_misuse_is_a_clear_spec_error(impl, message):
    with pytest.raises(SpecError, match=message):
        parse_spec(_rps(bad=impl), base_dir=RPS.parent)


def test_external_environment_is_skipped_and_cannot_describe_auto_schemas(tmp_path):
    raw = _rps()
    raw["environments"]["ts_env"] = {"external": True}
    spec = parse_spec(raw, base_dir=RPS.parent)
    assert [loop.group for loop in environment_loops(MemoryBus(Settings()), spec)] == ["env.rps"]
    raw["trial"]["environment"] = "ts_env"
    raw["actor_classes"]["player"]["observation"] = "auto"
    with pytest.raises(SpecError, match="external"):
        parse_spec(raw, base_dir=RPS.parent)
