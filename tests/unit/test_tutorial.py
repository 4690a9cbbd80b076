"""docs/tutorial.md cannot drift from what it teaches: every fenced block of it is either a
file of examples/tutorial/ (or a marked region of one: ``<!-- file: PATH#NAME -->`` shows the
lines between ``tutorial:begin NAME`` and ``tutorial:end NAME``), the real output of a command
(``<!-- output: COMMAND -->``, run here), or shell commands — which
tests/integration/test_tutorial.py runs, every line, against the real broker and a browser."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
FOLDER = ROOT / "examples" / "tutorial"
BLOCK = re.compile(r"(?:<!-- (file|output): ([^\n]*?) -->\n)?```([a-z]*)\n(.*?)```", re.S)


def blocks(text: str | None = None) -> list[tuple[str | None, str, str, str]]:
    """(marker kind or None, its argument, language, content) of every fenced block, in order."""
    return [(m[1], m[2] or "", m[3], m[4]) for m in BLOCK.finditer(text if text is not None else TUTORIAL.read_text())]


def shown(argument: str) -> str:
    """What a ``file`` marker names: the file, or the region of it after ``#``."""
    path, _, region = argument.partition("#")
    text = (ROOT / path).read_text()
    if not region:
        return text
    found = re.search(
        rf"^[^\n]*tutorial:begin {re.escape(region)}\n(.*?)^[^\n]*tutorial:end {re.escape(region)}\n", text, re.S | re.M
    )
    assert found, f"{path} has no region {region!r} (lines marked tutorial:begin/end {region})"
    return found[1]


def shell_lines() -> list[str]:
    """Every command of the tutorial's shell blocks, one a line, in order."""
    return [line for _, _, lang, body in blocks() if lang == "bash" for line in body.splitlines() if line.strip()]


def how_to_run(line: str) -> str:
    """How tests/integration/test_tutorial.py runs a shell line of the tutorial: ``set`` (export
    NAME=value), ``capture`` (export NAME=$(command): the command's output), ``background``
    (command &: a service, left running), ``person`` (trial start --wait: a person plays the
    links it prints in the browser) or ``run`` (a command that must succeed)."""
    if re.fullmatch(r"export [A-Z_]+=\$\(.+\)", line):
        return "capture"
    if re.fullmatch(r"export [A-Z_]+=[^$`;&|]+", line):
        return "set"
    if line.endswith(" &"):
        return "background"
    if line.startswith("trialog trial start ") and "--wait" in line.split():
        return "person"
    if re.search(r"[;&|`]|\$\(", line):
        raise ValueError(f"a tutorial command the integration test cannot run line by line: {line}")
    return "run"


def test_the_scan_finds_every_fenced_block():
    fences = TUTORIAL.read_text().count("```")
    assert fences % 2 == 0 and len(blocks()) == fences // 2 >= 10


def test_every_block_is_a_file_an_output_or_commands():
    for kind, argument, lang, body in blocks():
        assert kind is not None or lang == "bash", f"a {lang or 'plain'} block without a file or output marker:\n{body}"
        assert kind != "file" or lang in ("python", "yaml", "js"), (argument, lang)


def test_every_file_block_is_the_file_as_it_is():
    for kind, argument, _, body in blocks():
        if kind == "file":
            assert body == shown(argument), f"docs/tutorial.md shows {argument} as it is not: copy the file into it"


def test_the_tutorial_shows_every_file_of_its_folder():
    """A user copying the folder reads about each file in it."""
    files = {str(p.relative_to(ROOT)) for p in FOLDER.rglob("*") if p.is_file() and p.suffix in (".py", ".js", ".yaml")}
    files -= {"examples/tutorial/__init__.py"}
    named = {argument.partition("#")[0] for kind, argument, _, _ in blocks() if kind == "file"}
    assert files == named


def test_a_shown_output_is_what_the_command_prints():
    outputs = [(argument, body) for kind, argument, _, body in blocks() if kind == "output"]
    assert outputs
    for command, body in outputs:
        assert command in shell_lines(), f"the output of {command!r} is shown, but the command is not"
        words = shlex.split(command)
        assert words[0] == "trialog"
        out = subprocess.run(
            [sys.executable, "-m", "trialog.cli", *words[1:]], capture_output=True, text=True, cwd=ROOT, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout == body, f"docs/tutorial.md shows another output of {command!r}:\n{out.stdout}"


def test_a_region_marker_and_a_changed_file_are_caught(tmp_path):
    """The comparison is strict: one character off in a block fails it."""
    kind, argument, _, body = next(b for b in blocks() if b[0] == "file")
    text = f"<!-- file: {argument} -->\n```python\n{body.replace('=', '==', 1)}```\n"
    ((_, _, _, changed),) = blocks(text)
    assert changed != shown(argument)
    with pytest.raises(AssertionError, match="no region"):
        shown(f"{argument}#no-such-region")


def test_the_integration_test_knows_how_to_run_every_command():
    """Every shell line is of a form tests/integration/test_tutorial.py runs (it fails on any other)."""
    kinds = [how_to_run(line) for line in shell_lines()]
    assert {"capture", "set", "background", "person", "run"} <= set(kinds), kinds
