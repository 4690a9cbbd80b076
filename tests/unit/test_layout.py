"""Where things live (docs/design.md, "Layout"): a few modules at the top of trialog/, no
module too long to read, one shape for every service folder, and the services' commands
through the entry point. The import layering itself is import-linter's contracts in
pyproject.toml, which .ci/lint.sh checks on the built wheel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_TOP_LEVEL_MODULES = 12  # trialog/*.py, __init__ included: the rest lives in subpackages named for their audience
MAX_MODULE_LINES = 600  # longer than this, a module does several jobs: split it along them


def test_at_most_a_dozen_modules_at_the_top_of_the_sdk():
    top = sorted(p.name for p in (ROOT / "trialog").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, (
        f"{len(top)} modules at the top of trialog/ (put them in a subpackage): {top}"
    )


def test_no_module_is_too_long_to_read():
    long = {
        str(p.relative_to(ROOT)): n
        for top in ("trialog", "services")
        for p in (ROOT / top).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job): {long}"


def test_every_service_folder_has_one_shape():
    """cli.py adds its `trialog serve` command, main.py (or app.py, for the web apps) runs the
    process; handler.py is what it does with each record, unless a runtime of the SDK is
    its handler (trialog.runtime.actor_runtime, environment_runtime)."""
    folders = sorted(p for p in (ROOT / "services").iterdir() if (p / "__init__.py").exists())
    assert folders, "no service folders found"
    for folder in folders:
        files = {p.name for p in folder.glob("*.py")}
        assert "cli.py" in files, f"{folder.name}: no cli.py"
        assert files & {"main.py", "app.py"}, f"{folder.name}: neither main.py nor app.py"


def test_service_commands_come_through_the_entry_point():
    """``trialog serve`` lists the services although trialog/ never names them."""
    out = subprocess.run(
        [sys.executable, "-m", "trialog.cli", "serve", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.returncode == 0, out.stderr
    for service in ("orchestrator", "environment", "actors", "logger"):
        assert service in out.stdout, (
            f"`trialog serve {service}` missing: is the package installed (pip install -e .)?\n{out.stdout}"
        )
