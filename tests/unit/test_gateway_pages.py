"""The operator's pages folder (``trialog serve gateway --pages DIR``): its files are served
under /pages/, nothing outside it is, and a seat's welcome names the page for its
environment; an adapter's ``view`` may name the operator's own function."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
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
    assert gw.page_of("any", "bids") == "/pages/bids.js"
    assert gw.page_of("any", "rps") is None and gw.page_of("any", "../secret") is None


def test_without_a_folder_no_page_is_served():
    app = build_app(MemoryBus(Settings()), {}, base_url="http://testserver")
    assert TestClient(app).get("/pages/bids.js").status_code == 404
    assert app.state.gateway.page_of("any", "bids") is None


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


# --- a spec's environment names its page (``page:``) ------------------------------------------

SPEC_WITH_PAGE = """
name: {name}
actor_classes:
  player: {{observation: {{type: int}}, action: {{type: int}}}}
environments:
  {environment}: {{entry: "trialog.examples.rps.game:RockPaperScissors", page: {page}}}
actors:
  random: {{entry: "trialog.agents.random_agent:RandomAgent"}}
trial:
  environment: {environment}
  actors: [{{name: a, class: player, implementation: random}}]
"""


def spec_with_page(page: str, *, name: str = "s", environment: str = "bids"):
    from trialog.spec import parse_spec

    return parse_spec(yaml.safe_load(SPEC_WITH_PAGE.format(name=name, environment=environment, page=page)))


@pytest.mark.parametrize(
    ("page", "kept"),
    [("rope.js", "rope.js"), ("games/rope.js", "games/rope.js"), ("./games//rope.js", "games/rope.js")],
)
def test_a_spec_names_an_environments_page_by_a_relative_path(page, kept):
    assert spec_with_page(page).environments["bids"].page == kept


@pytest.mark.parametrize(
    ("page", "why"),
    [
        ("../rope.js", "no '..'"),
        ("games/../../rope.js", "no '..'"),
        ("/srv/pages/rope.js", "no absolute path"),
        ("C:/pages/rope.js", "no drive"),
        ("games\\\\rope.js", "no backslash"),
        ("rope.html", "ending in .js"),
        ("rope", "ending in .js"),
        ("'.'", "by its path inside"),
        ("''", "non-empty string"),
        ("[rope.js]", "non-empty string"),
    ],
)
def test_a_page_that_could_lead_out_of_the_folder_is_refused_when_the_spec_loads(page, why):
    with pytest.raises(SpecError) as caught:
        spec_with_page(page)
    assert why in str(caught.value) and "environments.bids.page" in str(caught.value)


def test_only_an_environment_names_a_page():
    from trialog.spec import parse_spec

    raw = yaml.safe_load(SPEC_WITH_PAGE.format(name="s", environment="bids", page="rope.js"))
    raw["actors"]["random"]["page"] = "rope.js"
    with pytest.raises(SpecError, match="actors.random"):
        parse_spec(raw)


def test_the_named_page_draws_its_environment_then_environment_js_then_the_shipped_page(tmp_path):
    pages = tmp_path / "pages"
    (pages / "games").mkdir(parents=True)
    (pages / "games" / "rope.js").write_text("export function create() { return {}; }\n")
    (pages / "duel.js").write_text("export function create() { return {}; }\n")
    specs = [
        spec_with_page("games/rope.js", name="one", environment="tug"),
        spec_with_page("games/rope.js", name="two", environment="pull"),  # one page, two environments
        spec_with_page("missing.js", name="three", environment="duel"),  # not in the folder: duel.js
        spec_with_page("missing.js", name="four", environment="rps"),  # nor rps.js: the shipped page
    ]
    app = build_app(MemoryBus(Settings()), {s.name: s for s in specs}, base_url="http://testserver", pages=pages)
    gw = app.state.gateway
    assert gw.page_of("one", "tug") == gw.page_of("two", "pull") == "/pages/games/rope.js"
    assert gw.page_of("three", "duel") == "/pages/duel.js" and gw.page_of("four", "rps") is None
    assert gw.page_of("another", "tug") is None  # no tug.js: a spec that names no page for tug gets the shipped one
    assert TestClient(app).get("/pages/games/rope.js").status_code == 200
    # Without a folder no page is the operator's, whatever the specs name.
    bare = build_app(MemoryBus(Settings()), {s.name: s for s in specs}, base_url="http://testserver")
    assert bare.state.gateway.page_of("one", "tug") is None


def test_two_specs_may_draw_one_environment_name_with_pages_of_their_own(tmp_path):
    for name in ("a.js", "b.js", "tug.js"):
        (tmp_path / name).write_text("export function create() { return {}; }\n")
    specs = [
        spec_with_page("a.js", name="one", environment="tug"),
        spec_with_page("b.js", name="two", environment="tug"),
    ]
    gw = build_app(MemoryBus(Settings()), {s.name: s for s in specs}, base_url="http://testserver", pages=tmp_path)
    gw = gw.state.gateway
    assert (gw.page_of("one", "tug"), gw.page_of("two", "tug")) == ("/pages/a.js", "/pages/b.js")
    assert gw.page_of("three", "tug") == "/pages/tug.js"  # a spec naming no page: <environment>.js
