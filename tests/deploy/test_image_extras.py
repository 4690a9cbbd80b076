"""The image holds what every service the chart can run needs: each `trialog serve X` of
the chart's templates whose command asks for an optional extra (`require_extra` in
services/X/cli.py) finds that extra installed by the Dockerfile's builder stage — the
gateway, which the chart enables with `gateway.enabled`, included."""

from __future__ import annotations

import re

from deploykit import CHART_DIR, ROOT


def _image_extras() -> set[str]:
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    (extras,) = re.findall(r"pip install [^\n]*\"\.\[([\w,]+)\]\"", text)
    return set(extras.split(","))


def _chart_services() -> set[str]:
    templates = "".join(p.read_text() for p in (CHART_DIR / "templates").glob("*"))
    services = set(re.findall(r'list "serve" "(\w+)"', templates))
    if 'ternary "environment" "actors"' in templates:
        services |= {"environment", "actors"}
    return services


def _extras_asked_by(service: str) -> set[str]:
    cli = ROOT / "services" / service / "cli.py"
    return set(re.findall(r'require_extra\("[\w.]+", "(\w+)"', cli.read_text())) if cli.exists() else set()


def test_the_image_installs_the_extra_of_every_service_the_chart_runs():
    services = _chart_services()
    assert {"orchestrator", "gateway", "logger", "learner", "environment", "actors"} <= services, services
    missing = {s: _extras_asked_by(s) - _image_extras() for s in services}
    assert not {s: m for s, m in missing.items() if m}, f"the image lacks extras the chart's services need: {missing}"


def test_the_extras_read_are_the_packages():
    pyproject = (ROOT / "pyproject.toml").read_text()
    for extra in _image_extras():
        assert re.search(rf"^{extra} = \[", pyproject, re.M), f"the image installs {extra}, which the package lacks"
    assert _extras_asked_by("gateway") == {"gateway"}
