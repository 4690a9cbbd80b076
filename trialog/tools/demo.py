"""``trialog demo``: the front door — a real campaign on a local broker it starts itself.

Starts the local Kafka broker (fetching it the first time), creates the topics,
runs the services of the demo spec as local processes, runs a campaign over
several implementation pairings with progress, and prints returns per pairing.

With ``--humans``: the web gateway too, and one real-time Overcooked trial in
which you are ``cook_a`` beside the planner — it prints the link to open.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from trialog.runtime.process import run_async
from trialog.settings import Settings


def _examples_dir() -> Path:
    """The shipped examples: the ``trialog.examples`` package, which maps to the repository's
    ``examples/`` folder in a checkout and ships inside a wheel."""
    import trialog.examples

    return Path(trialog.examples.__path__[0])


EXAMPLES = _examples_dir()


def example_spec(spec: str) -> str:
    """A spec file's path as given, or, when no such file exists and ``spec`` names a
    shipped example (``rps``, ``overcooked``, ``cartpole``), that example's spec: so that
    ``trialog run rps`` works from any folder, a wheel install included."""
    if Path(spec).exists() or "/" in spec or not (shipped := EXAMPLES / spec / "spec.yaml").is_file():
        return spec
    return str(shipped)


# spec file -> implementation pairings compared by the campaign
DEMOS = {
    "rps": (
        "rps/spec.yaml",
        [
            {"alice": "random", "bob": "counter"},
            {"alice": "counter", "bob": "counter"},
            {"alice": "random", "bob": "random"},
        ],
    ),
    "overcooked": (
        "overcooked/spec.yaml",
        [{"cook_a": "planner", "cook_b": "planner"}, {"cook_a": "planner", "cook_b": "random"}],
    ),
}


def default_game() -> str:
    return "overcooked" if (EXAMPLES / "overcooked" / "spec.yaml").exists() else "rps"


def demo_settings(bootstrap: str, environ=None) -> Settings:
    """The demo's settings: its own topic prefix, unless TRIALOG_TOPIC_PREFIX names one."""
    environ = os.environ if environ is None else environ
    flags = {"bootstrap_servers": bootstrap}
    if "TRIALOG_TOPIC_PREFIX" not in environ:
        flags["topic_prefix"] = "trialog-demo."
    return Settings.load(flags, environ=environ)


def follow_up(settings: Settings, command: str) -> str:
    """``trialog <command>`` as the demo prints it for later: with the demo's topic prefix
    (and broker, if not the default one), which a command typed in another shell would
    not otherwise know."""
    where = f" --topic-prefix {settings.topic_prefix}"
    if settings.bootstrap_servers != Settings().bootstrap_servers:
        where += f" --bootstrap-servers {settings.bootstrap_servers}"
    return f"trialog {command}{where}"


def play_with_people(settings: Settings, gateway_port: int, max_ticks: int | None) -> int:
    """One real-time Overcooked trial with a person in cook_a's seat, beside the planner."""

    from trialog.spec import load_spec
    from trialog.tools.campaign import create_topics, local_services

    spec_file = str(EXAMPLES / PEOPLE_SPEC)
    spec = load_spec(spec_file)
    run_async(create_topics(settings, local_instances=1))
    print("starting the services and the web gateway…", file=sys.stderr)
    with local_services(settings, spec_file, gateway_port=gateway_port):
        return run_async(_one_trial_with_people(settings, spec, max_ticks))


PEOPLE_SPEC = "overcooked/people.yaml"


async def _one_trial_with_people(settings: Settings, spec, max_ticks: int | None) -> int:
    import asyncio

    from trialog.bus import connect
    from trialog.controller import Controller

    async with Controller(connect(settings), name="demo") as ctl:
        trial_id = await ctl.start_trial(spec.name, **({"max_ticks": max_ticks} if max_ticks else {}))
        for actor, url in ctl.join_links(trial_id, spec.seats()).items():
            print(f"Play Overcooked beside the planner as {actor}: open {url}", flush=True)
        print(
            f"(lobby: {settings.gateway_url}/ — watch and judge: {settings.gateway_url}/watch/{trial_id})", flush=True
        )
        ended = await ctl.wait_ended(trial_id)
        await asyncio.sleep(3)  # the gateway stops with the demo: let the page show the end first
    print(f"trial {trial_id} ended: {ended.reason} at tick {ended.tick}", flush=True)
    export = follow_up(settings, "export --implementation human --out demonstrations.parquet")
    print(f"your moves are in the log: {export}", flush=True)
    return 0 if ended.reason in ("max_ticks", "environment") else 1
