"""The wheel's layout, read from pyproject.toml: one import package (trialog), every
package of the repository listed, the services and the data folders mapped into it.
(.ci/wheel.sh builds the wheel and runs the demo from it.)"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _folder(package: str) -> Path:
    """Where a listed package's files are, by the package-dir mapping."""
    mapping = CONFIG["package-dir"]
    best = max((name for name in mapping if package == name or package.startswith(name + ".")), key=len, default=None)
    if best is None:
        return ROOT.joinpath(*package.split("."))
    return (
        ROOT / mapping[best] / Path(*package[len(best) + 1 :].split(".")) if package != best else ROOT / mapping[best]
    )


def test_every_python_folder_is_a_listed_package():
    listed = {_folder(p).resolve() for p in CONFIG["packages"]}
    folders = {p.parent.resolve() for top in ("trialog", "services") for p in (ROOT / top).rglob("*.py")}
    missing = sorted(str(f.relative_to(ROOT)) for f in folders - listed)
    assert not missing, (
        f"add these to [tool.setuptools] packages in pyproject.toml, or they are not in the wheel: {missing}"
    )


def test_one_import_package():
    assert {p.split(".")[0] for p in CONFIG["packages"]} == {"trialog"}
    assert all(_folder(p).is_dir() for p in CONFIG["packages"]), [
        p for p in CONFIG["packages"] if not _folder(p).is_dir()
    ]


def test_old_service_entries_say_their_new_name():
    import pytest

    from trialog.errors import SpecError
    from trialog.spec import load_entry

    with pytest.raises(SpecError, match="trialog.examples.rps.players:CounterPlayer"):
        load_entry("services.actors.agents.scripted:CounterPlayer")
    assert load_entry("trialog.examples.rps.players:CounterPlayer").__name__ == "CounterPlayer"
    with pytest.raises(SpecError, match="'trialog.examples.rps.game:RockPaperScissors'"):
        load_entry("trialog.services.environment.games.rps:RockPaperScissors")
    with pytest.raises(SpecError, match="'trialog.adapters.pettingzoo:PettingZooEnvironment'"):
        load_entry("services.environment.adapters.pettingzoo:PettingZooEnvironment")
    with pytest.raises(SpecError, match="'trialog.services.gateway.app:x'"):
        load_entry("services.gateway.app:x")
