#!/usr/bin/env bash
# The tree's form and layering (docs/design.md, "Layout"): ruff's format check and lint
# over the whole tree, then import-linter's contracts (pyproject.toml) on the built wheel,
# where the services sit under trialog.services as they do once installed.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

ruff format --check .
ruff check .

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip wheel . --no-deps -w "$work/dist" -q 2>/dev/null
python3 -m zipfile -e "$work"/dist/trialog-*.whl "$work/unpacked"
cd "$work/unpacked"
PYTHONPATH="$work/unpacked" lint-imports "$repo/pyproject.toml"
