#!/usr/bin/env bash
# Language-neutral proof: Java's own Avro implementation must read what Python writes.
#
#   1. regenerate the test vectors into a temp dir and fail if they differ from the
#      committed schemas/vectors/ (so they can't go stale);
#   2. build interop/java and run it against schemas/vectors/.
#
# Needs: Python with Trialog installed (pip install -e .), Java 17+, Maven (reaches
# Maven Central). Run from anywhere; paths are taken from the repository root.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "interop: regenerating test vectors"
"$python" tools/make_vectors.py --out "$tmp/vectors"
if ! diff -r "$tmp/vectors" schemas/vectors >"$tmp/diff.txt"; then
  head -n 40 "$tmp/diff.txt"
  echo "interop: schemas/vectors/ is stale: run 'python tools/make_vectors.py' and commit the result" >&2
  exit 1
fi

echo "interop: building the Java checker"
if ! mvn -B -f interop/java/pom.xml package >"$tmp/mvn.log" 2>&1; then
  tail -n 60 "$tmp/mvn.log"
  echo "interop: the Java checker did not build" >&2
  exit 1
fi

echo "interop: decoding the vectors with Apache Avro for Java"
java -jar interop/java/target/trialog-interop.jar schemas/vectors schemas
