#!/usr/bin/env bash
# README, "from a built wheel": build the wheel, check that it installs no top-level
# package but trialog, install it into a fresh virtualenv and run `trialog demo` (and a
# shipped preset's name) from an empty folder, far from the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip wheel . --no-deps -w "$work/dist" -q
wheel=$(ls "$work"/dist/trialog-*.whl)
python3 - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
assert tops == {"trialog"}, f"the wheel installs {sorted(tops)}: only trialog is Trialog's"
for needed in ("trialog/services/gateway/static/play.html", "trialog/examples/rps/spec.yaml", "trialog/presets/dqn_cartpole.py", "trialog/_schemas/action.avsc"):
    assert needed in names, f"the wheel lacks {needed}"
print(f"{sys.argv[1].rsplit('/', 1)[-1]}: {len(names)} files, one top-level package: trialog")
PY
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$wheel[envs,plot]"
mkdir "$work/empty"
cd "$work/empty"
"$work/venv/bin/trialog" demo --trials 2 --concurrency 2
# Every shipped example by its name, from the same empty folder, on the broker the demo
# started (its services run from the wheel too).
export TRIALOG_TOPIC_PREFIX=trialog-wheel.
"$work/venv/bin/trialog" run rps --serve --trials 2 --plot ''
"$work/venv/bin/trialog" run overcooked --serve --trials 1 --max-ticks 40 --plot ''
"$work/venv/bin/trialog" run cartpole --serve --trials 1 --implementation agent=random --plot ''
"$work/venv/bin/python" -c "from trialog.learn.train import load_preset; p = load_preset('dqn_cartpole'); print('shipped preset', p.name, '->', p.spec)"
