"""Helpers of the deployment checks: where things are, the tools, rendered objects.

The tools come from PyPI and work offline once installed: helm-python-sdk
(Helm's Go SDK as a shared library: load, lint, render, schema checks),
kubernetes-validate (the Kubernetes OpenAPI schemas, per version), jsonschema
and setuptools (the build backend). ``.ci/deploy-checks.sh`` installs them. A missing tool fails
the tests that need it with the install command; nothing is skipped.
"""

from __future__ import annotations

import copy
import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "helm" / "trialog"
VALUES_DIR = Path(__file__).parent / "values"
RELEASE = "rel"
NAMESPACE = "trialog"


def need(module: str, package: str) -> ModuleType:
    """Import a tool, or fail the test with how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        pytest.fail(
            f"{package} is needed for the deployment checks and is not installed ({error}); "
            f"run .ci/deploy-checks.sh, or `pip install {package}`",
            pytrace=False,
        )


def load_values(name: str) -> dict[str, Any]:
    """A value set from tests/deploy/values/, as a fresh dict."""
    with open(VALUES_DIR / f"{name}.yaml") as handle:
        return copy.deepcopy(yaml.safe_load(handle))


class Rendered:
    """A chart rendered as `helm install` would, split into objects."""

    def __init__(self, manifests: dict[str, str]) -> None:
        self.notes = manifests.pop("trialog/templates/NOTES.txt", "")
        self.objects: list[dict[str, Any]] = []
        # The template each object came from, for error messages.
        self.sources: list[str] = []
        for template, text in sorted(manifests.items()):
            for document in yaml.safe_load_all(text):
                if document:
                    self.objects.append(document)
                    self.sources.append(template)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        matches = [obj for obj in self.of_kind(kind) if obj["metadata"]["name"] == name]
        names = [obj["metadata"]["name"] for obj in self.of_kind(kind)]
        assert len(matches) == 1, f"expected one {kind} named {name}, found {names}"
        return matches[0]


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    """The one container of a chart Deployment or Job."""
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def env_of(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Environment variables of the container, by name."""
    return {item["name"]: item for item in container(deployment)["env"]}
