"""The image's recipe holds together, as far as a machine without a Docker engine can tell.

No image is built here (no Docker engine on these machines; hadolint lints the
Dockerfile in .ci/deploy-checks.sh). What can be checked without one is:
the build context that .dockerignore lets through holds everything the
Dockerfile copies; the builder stage's `pip install .` turns that context into
a wheel with the packages, the schemas and the `trialog` command; and the final
stage agrees with what the chart assumes (user, port, entrypoint).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml
from deploykit import CHART_DIR, ROOT, need

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


def _stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's stages, each a list of (instruction, arguments); line continuations joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: list[list[tuple[str, str]]] = [[]]
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, arguments = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), arguments.strip()))
    return stages[1:]


def _ignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """.dockerignore as (is_exception, regex), with Docker's pattern syntax."""
    rules = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        pattern = line.lstrip("!").strip().strip("/")
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif pattern[i] == "?":
                regex, i = regex + "[^/]", i + 1
            elif pattern[i] == "[" and "]" in pattern[i + 1 :]:
                end = pattern.index("]", i + 1)
                regex, i = regex + "[" + pattern[i + 1 : end].replace("\\", "\\\\") + "]", end + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        rules.append((exception, re.compile(regex)))
    return rules


def _in_context(relative: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent folders decides."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for exception, regex in rules:
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            excluded = not exception
    return not excluded


def _context_files() -> list[str]:
    """The files Docker would send as the build context."""
    rules = _ignore_rules()
    files = []
    for folder, subfolders, names in os.walk(ROOT):
        base = Path(folder).relative_to(ROOT).as_posix()
        prefix = "" if base == "." else base + "/"
        # Docker reads every folder; skipping the excluded ones (a local
        # virtualenv, .git) is only safe where no exception could let a file back in.
        subfolders[:] = [
            sub
            for sub in subfolders
            if _in_context(prefix + sub, rules)
            or any(exception and regex.pattern.startswith(re.escape(prefix + sub)) for exception, regex in rules)
        ]
        files.extend(prefix + name for name in names if _in_context(prefix + name, rules))
    return sorted(files)


def _builder_copy_sources() -> list[str]:
    builder = _stages()[0]
    sources = []
    for instruction, arguments in builder:
        if instruction == "COPY" and "--from" not in arguments:
            sources.extend(shlex.split(arguments)[:-1])
    return sources


def test_the_context_holds_everything_the_builder_copies() -> None:
    context = _context_files()
    sources = _builder_copy_sources()
    assert {"pyproject.toml", "trialog", "services", "schemas", "examples", "presets"} <= set(sources)
    for source in sources:
        assert (ROOT / source).exists(), f"the Dockerfile copies {source}, which is not in the repository"
        assert any(f == source or f.startswith(source + "/") for f in context), (
            f"the Dockerfile copies {source}, but .dockerignore keeps it out of the build context"
        )
    assert not [f for f in context if f.startswith(("tests/", "docs/", "helm/", ".ci/"))]
    assert not [f for f in context if "__pycache__" in f or f.endswith(".pyc")]


def test_the_builder_stage_makes_a_complete_wheel_from_that_context(tmp_path: Path) -> None:
    need("setuptools", "setuptools")
    context = tmp_path / "context"
    for relative in _context_files():
        target = context / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, target)
    # What `pip install ".[envs,datalog,learn]"` does first, without the dependencies
    # (they come from PyPI as wheels) and without fetching the build backend.
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(context),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = (tmp_path / "dist").glob("trialog-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "trialog/telemetry/health.py" in names
    assert any(n.startswith("trialog/services/") for n in names), "the services are not in the wheel"
    assert {n.split("/")[0] for n in names if ".dist-info" not in n} == {"trialog"}, (
        "the wheel installs a top-level package besides trialog"
    )
    assert "trialog/examples/rps/spec.yaml" in names, "the examples are not in the wheel"
    assert any(n.startswith("trialog/_schemas/") and n.endswith(".avsc") for n in names), "no Avro schemas in the wheel"
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    entry_text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "trialog = trialog.cli:main" in entry_text
    assert "[trialog.commands]" in entry_text and "services = trialog.services.cli:add_commands" in entry_text, (
        "`trialog serve` would list no service"
    )
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    for extra in ("envs", "datalog"):
        assert f"Provides-Extra: {extra}" in metadata, f"the image installs the extra {extra}, which the package lacks"


def test_the_final_stage_is_what_the_chart_expects() -> None:
    builder, final = _stages()
    final_instructions = dict(final)
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    # The virtualenv is copied between stages, so both must have the same Python at the same path.
    assert builder[0][1].split()[0] == final[0][1].split()[0] == "${PYTHON_IMAGE}"
    assert (
        final_instructions["USER"]
        == f"{values['podSecurityContext']['runAsUser']}:{values['podSecurityContext']['runAsGroup']}"
    )
    assert final_instructions["EXPOSE"] == str(values["health"]["port"])
    # The chart's args start with a subcommand ("serve", "topics"), so the entrypoint is the CLI itself.
    assert json.loads(final_instructions["ENTRYPOINT"]) == ["trialog"]
    assert not any("apt-get" in arguments or "pip " in arguments for _, arguments in final), (
        "the final stage installs nothing"
    )
