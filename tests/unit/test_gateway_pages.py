"""The operator's pages folder (``trialog serve gateway --pages DIR``): its files are served
under /pages/, nothing outside it is, and a seat's welcome names the page for its
environment; an adapter's ``view`` may name the operator's own function."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from trialog.adapters.hosting import HostConfig, HostedEnvironment
from trialog.adapters.views import view_function
from trialog.bus.memory import MemoryBus
from trialog.environment import TrialInfo
from trialog.errors import SpecError
from trialog.protocol.trial import operator_code
from trialog.services.gateway.app import build_app
from trialog.services.gateway.routes import user_page
from trialog.settings import Settings


@pytest.fixture
def folders(tmp_path):
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "bids.js").write_text("export function create() { return {}; }\n")
    (pages / "lib").mkdir()
    (pages / "lib" / "draw.js").write_text("export const x = 1;\n")
    (tmp_path / "secret.txt").write_text("not for browsers")
    os.symlink(tmp_path / "secret.txt", pages / "link.js")
    return pages


def test_files_inside_the_folder_are_found_and_nothing_outside(folders):
    assert user_page(folders.resolve(), "bids.js") == (folders / "bids.js").resolve()
    assert user_page(folders.resolve(), "lib/draw.js") == (folders / "lib" / "draw.js").resolve()
    for name in ("../secret.txt", "lib/../../secret.txt", str(folders.parent / "secret.txt"), "link.js", "nope.js"):
        assert user_page(folders.resolve(), name) is None, name


def test_the_gateway_serves_the_folder_and_refuses_paths_out_of_it(folders):
    app = build_app(MemoryBus(Settings()), {}, base_url="http://testserver", pages=folders)
    client = TestClient(app)
    page = client.get("/pages/bids.js")
    assert page.status_code == 200 and "export function create" in page.text
    assert page.headers["content-type"].startswith("text/javascript")
    assert client.get("/pages/lib/draw.js").status_code == 200
    for path in ("/pages/../secret.txt", "/pages/%2e%2e/secret.txt", "/pages/lib/%2e%2e/%2e%2e/secret.txt",
                 "/pages/%2Fetc%2Fpasswd", "/pages/link.js", "/pages/missing.js"):  # fmt: skip
        answer = client.get(path)
        assert answer.status_code == 404 and "not for browsers" not in answer.text, path
    gw = app.state.gateway
    assert gw.page_of("bids") == "/pages/bids.js" and gw.page_of("rps") is None and gw.page_of("../secret") is None


def test_without_a_folder_no_page_is_served():
    app = build_app(MemoryBus(Settings()), {}, base_url="http://testserver")
    assert TestClient(app).get("/pages/bids.js").status_code == 404
    assert app.state.gateway.page_of("bids") is None


def draw(env, actors):
    """An operator's view function (named by import path in the tests below)."""
    return {"kind": "mine", "actors": dict(actors), "env": type(env).__name__}


def test_a_view_by_import_path_is_the_operators_function():
    assert view_function(f"{__name__}:draw") is draw
    assert HostConfig.parse({"env": "x:y", "view": f"{__name__}:draw"}).view == f"{__name__}:draw"
    with pytest.raises(SpecError, match="package.module:function"):
        HostConfig.parse({"env": "x:y", "view": "no_such_view"})


def test_the_view_comes_from_the_operators_spec_never_from_the_record():
    info = TrialInfo(trial_id="t", seed=0, config={"env": "x:y", "view": "evil.module:run"}, actors=())
    seen = operator_code(info, HostedEnvironment, {"env": "x:y", "view": f"{__name__}:draw"})
    assert seen.config["view"] == f"{__name__}:draw"
    assert "view" not in operator_code(info, HostedEnvironment, {"env": "x:y"}).config


def test_serve_gateway_takes_a_pages_folder(monkeypatch, folders, tmp_path):
    """``trialog serve gateway --spec SPEC --pages DIR`` (docs/humans.md) hands the folder to the
    gateway; a folder that is not there stops it with a clear message."""
    from trialog.cli import build_parser
    from trialog.services.gateway import app

    served = {}

    async def fake_main(bus, specs, **kwargs):
        served.update(kwargs, specs=list(specs))

    monkeypatch.setattr(app, "main", fake_main)
    monkeypatch.setattr("trialog.bus.connect", lambda settings: MemoryBus(settings))
    spec = Path(__file__).resolve().parents[2] / "examples" / "rps" / "spec.yaml"
    parser = build_parser()
    args = parser.parse_args(["serve", "gateway", "--spec", str(spec), "--pages", str(folders)])
    assert args.func(args) == 0
    assert served["pages"] == str(folders) and served["specs"] == ["rps"]
    args = parser.parse_args(["serve", "gateway", "--spec", str(spec), "--pages", str(tmp_path / "none")])
    with pytest.raises(SystemExit, match="not a folder"):
        args.func(args)


def test_a_hosted_environment_draws_its_view_with_the_operators_function():
    from trialog.adapters.gymnasium import GymnasiumEnvironment
    from trialog.environment import ActorInfo

    cast = (ActorInfo("pole", "balancer", "test"),)
    env = GymnasiumEnvironment(TrialInfo("t", 7, {"env": "CartPole-v1", "view": f"{__name__}:draw"}, cast))
    env.start()
    assert env.view() == {"kind": "mine", "actors": {"pole": env.agent_of["pole"]}, "env": "CartPoleEnv"}
    env.end()
