"""Fixtures of the deployment checks: the loaded chart and a renderer (see deploykit)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from deploykit import CHART_DIR, NAMESPACE, RELEASE, Rendered, need


@pytest.fixture(scope="session")
def helm() -> ModuleType:
    return need("helm_python", "helm-python-sdk")


@pytest.fixture(scope="session")
def chart(helm: ModuleType) -> Any:
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


@pytest.fixture(scope="session")
def render(chart: Any):
    """``render(values) -> Rendered``, as an install of release "rel" in namespace "trialog"."""

    def _render(values: dict[str, Any]) -> Rendered:
        return Rendered(chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True))

    return _render
