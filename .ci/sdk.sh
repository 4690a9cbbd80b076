#!/usr/bin/env bash
# Actors and environments in other languages (docs/protocol.md): build and unit-test the
# Go and TypeScript libraries (each decodes every test vector against `expected`), run the
# conformance suite against their actor services and the Go environment service on the
# real broker, and play mixed trials that must end normally and pass `trialog replay --verify`.
#
# Needs: a broker (TRIALOG_BOOTSTRAP_SERVERS), Trialog installed (pip install -e .),
# Go 1.26+, Node 20+ with npm. Run from anywhere; paths are from the repository root.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"  # where the machine's Go lives
: "${TRIALOG_BOOTSTRAP_SERVERS:?start a broker first: export TRIALOG_BOOTSTRAP_SERVERS=\$(trialog broker start)}"

echo "sdk: Go library — unit tests and build"
(cd sdk/go && go test ./... && go build -o bin/trialog-actors ./cmd/trialog-actors \
  && go build -o bin/trialog-environment ./cmd/trialog-environment)
go_actors="sdk/go/bin/trialog-actors --schemas schemas"
go_env="sdk/go/bin/trialog-environment --schemas schemas"

echo "sdk: TypeScript library — unit tests and build"
(cd sdk/typescript && npm ci --no-audit --no-fund --loglevel=error && npm test)
ts_actors="node sdk/typescript/dist/src/cmd/trialog-actors.js --schemas schemas"

echo "sdk: conformance of the Go actor service"
trialog conformance --spec examples/rps/spec.yaml --implementation go --command "$go_actors --serve go=rps-counter"
echo "sdk: conformance of the Go client seat (joins with a join token)"
trialog conformance --spec examples/rps/spec.yaml --implementation human --command "$go_actors --seat rps-counter"
echo "sdk: conformance of the TypeScript actor service"
trialog conformance --spec examples/rps/spec.yaml --implementation ts --command "$ts_actors --serve ts=rps-counter"
echo "sdk: conformance of the TypeScript client seat"
trialog conformance --spec examples/rps/spec.yaml --implementation human --command "$ts_actors --seat rps-counter"
echo "sdk: conformance of the Go environment service (and the same game as Python's)"
trialog conformance --spec sdk/go/examples/rps/spec.yaml --environment go_rps --same-as rps --command "$go_env --serve go_rps=rps"

pids=()
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_all EXIT

# A campaign under a fresh topic prefix, with external services started first; every
# trial must end normally and re-simulate identically from the log (with the spec
# VERIFY_SPEC, when the environment is external: its Python twin re-simulates it).
mixed() {
  local title="$1" spec="$2" trials="$3"; shift 3
  local verify="${VERIFY_SPEC:-$spec}"
  local run_args=() services=()
  while [ "$1" != "--" ]; do run_args+=("$1"); shift; done; shift
  services=("$@")
  export TRIALOG_TOPIC_PREFIX="ci-sdk-$(date +%s%N)."
  echo "sdk: mixed trials, $title ($TRIALOG_TOPIC_PREFIX)"
  trialog topics create >/dev/null
  local started=()
  for cmd in "${services[@]}"; do
    $cmd >"$(mktemp -t trialog-sdk-XXXX.log)" 2>&1 &
    started+=($!)
    pids+=($!)
  done
  trialog run "$spec" --serve --trials "$trials" --plot "$(mktemp -d)/returns.png" "${run_args[@]}"
  local ended=0
  while read -r trial _ status _ reason; do
    [ "$status" = ended ] || { echo "sdk: $trial is $status" >&2; exit 1; }
    case "$reason" in environment|max_ticks) ;; *) echo "sdk: $trial ended with $reason" >&2; exit 1 ;; esac
    trialog replay --verify --spec "$verify" "$trial" >/dev/null
    ended=$((ended + 1))
  done < <(trialog trial list | tail -n +2)
  [ "$ended" = "$trials" ] || { echo "sdk: $ended of $trials trials ended" >&2; exit 1; }
  echo "sdk: $title: $ended trials ended normally, replay --verify identical"
  for p in "${started[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done
  unset TRIALOG_TOPIC_PREFIX
}

mixed "rock-paper-scissors, Python vs Go" examples/rps/spec.yaml 3 --implementation bob=go -- "$go_actors --serve go=rps-counter"
mixed "Overcooked, Python planner vs Go" examples/overcooked/spec.yaml 1 --implementation cook_b=go --max-ticks 60 -- "$go_actors --serve go=overcooked-cook"
mixed "rock-paper-scissors, TypeScript vs Go" examples/rps/spec.yaml 3 --implementation alice=ts --implementation bob=go -- \
  "$ts_actors --serve ts=rps-counter" "$go_actors --serve go=rps-counter"
mixed "Overcooked, TypeScript vs Go" examples/overcooked/spec.yaml 1 --implementation cook_a=ts --implementation cook_b=go --max-ticks 60 -- \
  "$ts_actors --serve ts=overcooked-cook" "$go_actors --serve go=overcooked-cook"
VERIFY_SPEC=sdk/go/examples/rps/verify.yaml mixed "rock-paper-scissors in the Go environment, Python vs Go" \
  sdk/go/examples/rps/spec.yaml 3 -- "$go_env --serve go_rps=rps" "$go_actors --serve go=rps-counter"
VERIFY_SPEC=sdk/go/examples/rps/verify.yaml mixed "rock-paper-scissors in the Go environment, Python vs TypeScript" \
  sdk/go/examples/rps/spec.yaml 3 --implementation bob=ts -- "$go_env --serve go_rps=rps" "$ts_actors --serve ts=rps-counter"
echo "sdk: all checks passed"
