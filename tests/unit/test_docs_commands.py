"""Every ``trialog`` command the docs show exists: each command line in a code block or
inline code span of README.md, docs/*.md and the SDK READMEs names subcommands and
``--flags`` that the real parser (:func:`trialog.cli.build_parser`, the services' commands
included) accepts. A command or flag renamed or removed fails here until the docs follow."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from trialog.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("sdk/*/README.md"))]

# `trialog` as a command: at a line's start (after a prompt), or after what starts a command
# in a shell line (`&&`, `;`, `|`, `$(`, kubectl's `--`), never as another command's argument.
COMMAND = re.compile(r"(?:^\s*(?:\$\s+)?|(?:&&|\|\|?|;|\s--)\s*|\$\()trialog[ \t]+(?=[a-z-]|$)", re.M)
SHELL_ENDS = {"&&", "||", "|", ";", "&", ">", ">>", "2>", "2>&1"}
PLACEHOLDER = re.compile(r"^[A-Z_.…<\[]|^\.\.\.$|…")


def _snippets(text: str) -> list[str]:
    """The text after each ``trialog`` of the code blocks and inline code spans, one line each."""
    blocks = re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    spans = re.findall(r"`([^`\n]+)`", prose)
    found = []
    for chunk in [*blocks, *spans]:
        for line in chunk.replace("\\\n", " ").splitlines():
            found += [line[m.end() :] for m in COMMAND.finditer(line)]
    return found


def _tokens(rest: str) -> list[str]:
    """The command's words, up to the end of the shell command they belong to."""
    try:
        words = shlex.split(rest, comments=True)
    except ValueError:  # an unbalanced quote in prose: plain words will do
        words = rest.split()
    out = []
    for word in words:
        if word in SHELL_ENDS:
            break
        out.append(word.rstrip(")"))
        if word.endswith(")"):  # the end of $( ... )
            break
    return out


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _problems(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """What in one documented command line the parser does not know."""
    path, problems, rest = ["trialog"], [], list(words)
    while rest and (choices := _subparsers(parser)) and not rest[0].startswith("-"):
        word = rest[0]
        if PLACEHOLDER.search(word):
            break
        if word not in choices:
            problems.append(f"`{' '.join(path)} {word}`: no such command (has {', '.join(sorted(choices))})")
            return problems
        parser, path, rest = choices[word], [*path, word], rest[1:]
    known = parser._option_string_actions
    for word in rest:
        # A flag is a word of its own (a quoted --command "prog --x" is one word, not ours);
        # synopses write optional ones `[--flag` and alternatives `--a|--b`.
        for flag in re.findall(r"^\[?(--?[a-zA-Z][\w-]*)", word) + re.findall(r"\|(--?[a-zA-Z][\w-]*)", word):
            if flag not in known:
                problems.append(f"`{' '.join(path)}` has no flag {flag}")
    return problems


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser()


def test_the_docs_show_trialog_commands_to_check():
    """The scan finds the commands it is meant to check (so an empty scan cannot pass)."""
    found = {" ".join(_tokens(s)[:2]) for doc in DOCS for s in _snippets(doc.read_text())}
    assert {"broker start", "topics create", "conformance --spec", "keyring export"} <= found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_documented_command_and_flag_exists(parser, doc):
    problems = []
    for snippet in _snippets(doc.read_text()):
        words = _tokens(snippet)
        problems += [f"{p}  (in: trialog {' '.join(words)})" for p in _problems(parser, words)]
    assert not problems, f"{doc.relative_to(ROOT)} documents what the CLI does not have:\n" + "\n".join(problems)


def test_the_check_catches_a_missing_command_and_a_missing_flag(parser):
    assert _problems(parser, ["broker", "start", "--port", "9092"]) == []
    assert _problems(parser, ["broker", "launch"])
    assert _problems(parser, ["broker", "start", "--no-such-flag"])
    assert _problems(parser, _tokens('conformance --command "x --not-ours" --spec S)')) == []
