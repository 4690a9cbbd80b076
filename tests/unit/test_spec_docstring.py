"""The example spec in trialog/spec.py's docstring names code that exists: each ``entry``
imports (the example is what `help(trialog.spec)` shows a user writing a spec)."""

from __future__ import annotations

import re

import trialog.spec
from trialog.spec import load_entry


def test_every_entry_of_the_docstring_example_imports():
    entries = re.findall(r'entry: "([\w.]+:\w+)"', trialog.spec.__doc__)
    assert len(entries) >= 3, entries
    for entry in entries:
        load_entry(entry)  # raises SpecError naming the entry when it does not import
