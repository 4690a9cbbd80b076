"""Models you can take away, on the real broker: the commands of docs/learning.md run
verbatim, the NumPy snippet there acts as the policy does on an exported file, and an
imported file and a pinned version play trials."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.conftest import wait_for
from tests.harness import deployment
from trialog.actor import DecideRequest
from trialog.bus.kafka import KafkaBus
from trialog.datalog.replay import replay
from trialog.learn.dqn import DQNPolicy
from trialog.model_registry import make_version, publish, read_catalog
from trialog.spec import load_spec

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
MODEL = "cartpole-dqn"


def _section() -> str:
    text = (ROOT / "docs" / "learning.md").read_text()
    return text.split("## Models you can take away\n", 1)[1].split("\n## ", 1)[0]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", _section(), re.S)


def _net(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A DQN-shaped Q-network for CartPole (4 inputs, 16x16 hidden, 2 actions)."""
    sizes = [4, 16, 16, 2]
    out = {}
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        out[f"q/w{i}"] = rng.normal(0, 1 / np.sqrt(n_in), (n_in, n_out)).astype(np.float32)
        out[f"q/b{i}"] = rng.normal(0, 0.1, n_out).astype(np.float32)
    return out


async def _cli(settings, line: str, cwd: Path) -> str:
    """One documented command line, run as is with the test's connection settings."""
    argv = shlex.split(line)
    assert argv[0] == "trialog"
    flags = ["--bootstrap-servers", settings.bootstrap_servers, "--topic-prefix", settings.topic_prefix]
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "trialog.cli", *argv[1:], *flags],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    assert done.returncode == 0, f"{line}: {done.stdout}{done.stderr}"
    return done.stdout


def _snippet_act(folder: Path, monkeypatch):
    """The documented snippet, run in ``folder`` (where the export wrote its files): its act."""
    (snippet,) = _blocks("python")
    monkeypatch.chdir(folder)
    scope: dict = {}
    exec(compile(snippet, "docs/learning.md (Models you can take away)", "exec"), scope)
    monkeypatch.undo()
    return scope["act"]


async def test_the_documented_commands_and_snippet_take_a_model_away_and_bring_one_back(
    kafka_settings, tmp_path, monkeypatch
):
    rng = np.random.default_rng(7)
    nets = {n: _net(rng) for n in (1, 2, 3)}
    config = {"observation_size": 4, "actions": 2, "hidden": [16, 16]}
    bus = KafkaBus(kafka_settings)
    await bus.create_topics()
    async with bus:
        for n, net in nets.items():
            await publish(bus, make_version(MODEL, n, "dqn", net, {"env_steps": 1000 * n, "config": config}))

    (commands,) = [b for b in _blocks("bash")]
    outputs = [await _cli(kafka_settings, line, tmp_path) for line in commands.strip().splitlines()]
    listed, listed_one, shown, exported, imported, rolled_back = outputs

    assert f"{MODEL}@3" in listed and "(3 kept)" in listed
    assert [line.split()[0] for line in listed_one.splitlines()] == [f"{MODEL}@{n}" for n in (1, 2, 3)]
    assert "env_steps  2000" in shown and "q/w1" in shown and "[16, 16]" in shown
    async with bus:
        catalog = await read_catalog(bus)
    versions = catalog.versions(MODEL)
    # export: the version's bytes as they are, its config beside them
    file = tmp_path / "cartpole-dqn.safetensors"
    assert hashlib.sha256(file.read_bytes()).hexdigest() == versions[2].sha256
    sidecar = json.loads((tmp_path / "cartpole-dqn.json").read_text())
    assert (sidecar["version"], sidecar["algorithm"], sidecar["metadata"]["config"]) == (2, "dqn", config)
    assert sidecar["tensors"]["q/w0"] == {"dtype": "float32", "shape": [4, 16]}
    # import: the file as the newest version; rollback: version 1's weights as the one after
    assert sorted(versions) == [1, 2, 3, 4, 5], (imported, rolled_back)
    assert versions[4].sha256 == versions[2].sha256
    assert versions[4].meta["imported_from"] == {"file": "cartpole-dqn.safetensors", "model": MODEL, "version": 2}
    assert versions[5].sha256 == versions[1].sha256 and versions[5].meta["rolled_back_from"] == 1

    # The snippet acts on the exported file exactly as the policy acts with version 2.
    act = _snippet_act(tmp_path, monkeypatch)
    policy = DQNPolicy({"model": MODEL})
    policy.load(versions[2])
    observations = rng.normal(0, 1, (256, 4)) * np.array([1.0, 1.0, 0.2, 1.0])
    trial, actor = _Named(seed=1, phase="evaluate"), _Named(name="agent")
    expected = policy.decide_batch([DecideRequest(trial, actor, t, list(o)) for t, o in enumerate(observations)])
    assert [act(o) for o in observations] == expected
    assert set(expected) == {0, 1}, "a network that always picks one action would show little"

    # A file trained elsewhere (written with safetensors alone, no .json) plays; a pinned version does too.
    from safetensors.numpy import save_file

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    save_file(_net(rng), str(elsewhere / "cartpole-dqn.safetensors"))
    await _cli(
        kafka_settings, f"trialog models import cartpole-dqn.safetensors --name {MODEL} --algorithm dqn", elsewhere
    )
    away = tmp_path / "v6"
    await _cli(kafka_settings, f"trialog models export {MODEL}@6 --out {away}/cartpole-dqn.safetensors", tmp_path)
    assert (away / "cartpole-dqn.safetensors").read_bytes() == (elsewhere / "cartpole-dqn.safetensors").read_bytes()
    imported_trial, pinned_trial = await _play(kafka_settings, tmp_path)
    # the imported file (version 6) played the first; version 4 (the export of 2) the pinned one
    for samples, version, folder in ((imported_trial, 6, away), (pinned_trial, 4, tmp_path)):
        assert samples and {s.policy_version for s in samples} == {version}
        act = _snippet_act(folder, monkeypatch)
        assert [s.action for s in samples] == [act(s.observation) for s in samples]


class _Named:
    def __init__(self, **fields):
        self.__dict__.update(fields)


async def _play(settings, tmp_path: Path) -> tuple[list, list]:
    """The samples of a trial of `dqn`, following the newest version, then — once a newer
    version is out — of one of `dqn-v4`, pinned to version 4."""
    spec_data = yaml.safe_load((ROOT / "examples" / "cartpole" / "spec.yaml").read_text())
    spec_data["actors"] = {
        "dqn": {"entry": "trialog.learn.dqn:DQNPolicy", "config": {"model": MODEL}},
        "dqn-v4": {"entry": "trialog.learn.dqn:DQNPolicy", "config": {"model": f"{MODEL}@4"}},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec_data))
    bus = KafkaBus(settings)
    spec = load_spec(tmp_path / "spec.yaml", bus.store)

    async def trial(ctl, implementation: str, seed: int) -> list:
        tid = await ctl.start_trial(spec.name, seed=seed, implementations={"agent": implementation})
        await ctl.wait_ended(tid, timeout=120)
        return [s async for s in replay(bus, tid) if s.action is not None]

    async with deployment(bus, [spec]) as (d, ctl):
        policies = {
            loop.handler.implementation: loop.handler.policy for loop in d.loops if hasattr(loop.handler, "policy")
        }
        await wait_for(lambda: policies["dqn"].policy_version == 6, timeout=60, what="dqn playing version 6")
        await wait_for(lambda: policies["dqn-v4"].policy_version == 4, timeout=60, what="dqn-v4 playing version 4")
        newest = await trial(ctl, "dqn", seed=1)
        # A newer version reaches the implementation following the newest, not the pinned one.
        await publish(bus, make_version(MODEL, 7, "dqn", _net(np.random.default_rng(0)), {}))
        await wait_for(lambda: policies["dqn"].policy_version == 7, timeout=60, what="dqn playing version 7")
        pinned = await trial(ctl, "dqn-v4", seed=2)
    return newest, pinned


async def test_the_broker_keeps_the_newest_versions_the_setting_says(kafka_settings):
    import dataclasses

    bus = KafkaBus(dataclasses.replace(kafka_settings, model_versions_kept=2))
    await bus.create_topics()
    rng = np.random.default_rng(0)
    async with bus:
        for n in range(1, 6):
            await publish(bus, make_version(MODEL, n, "dqn", _net(rng), {}))
        assert sorted((await read_catalog(bus)).versions(MODEL)) == [4, 5]


async def test_a_trial_pins_the_version_its_actor_acts_with_while_the_implementation_follows_the_newest(
    kafka_settings, tmp_path
):
    """`trialog train`'s evaluations run this way beside training: the actor's config `model:
    NAME@VERSION` (the spec lets a start request set `model`) — a version the follower brought,
    one it never did (read from `models`), and one that is not there (the trial cannot play)."""
    spec_data = yaml.safe_load((ROOT / "examples" / "cartpole" / "spec.yaml").read_text())
    spec_data["actors"] = {
        "dqn": {"entry": "trialog.learn.dqn:DQNPolicy", "config": {"model": MODEL}, "overridable": ["model"]}
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec_data))
    bus = KafkaBus(kafka_settings)
    spec = load_spec(tmp_path / "spec.yaml", bus.store)
    (agent,) = spec.trial.actors
    nets = {n: _net(np.random.default_rng(n)) for n in (1, 2, 3, 4)}
    await bus.create_topics()
    async with bus:
        for n in (1, 2, 3):  # before the service starts: it is brought only the newest, 3
            await publish(bus, make_version(MODEL, n, "dqn", nets[n], {}))

    async def trial(ctl, model: str | None = None, seed: int = 1):
        config = {"model": model} if model else {}
        actors = [{"name": agent.name, "class": agent.actor_class, "implementation": "dqn", "config": config}]
        tid = await ctl.start_trial(spec.name, seed=seed, actors=actors, max_ticks=60)
        ended = await ctl.wait_ended(tid, timeout=120)
        return ended, [s async for s in replay(bus, tid) if s.action is not None]

    def greedy(n: int, samples) -> list[int]:
        policy = DQNPolicy({"model": MODEL})
        policy.load(make_version(MODEL, n, "dqn", nets[n], {}))
        requests = [
            DecideRequest(_Named(seed=1, phase=""), _Named(name=agent.name), s.tick, s.observation) for s in samples
        ]
        return policy.decide_batch(requests)

    async with deployment(bus, [spec]) as (d, ctl):
        (handler,) = [loop.handler for loop in d.loops if getattr(loop.handler, "implementation", "") == "dqn"]
        await wait_for(lambda: handler.policy.policy_version == 3, timeout=60, what="dqn playing version 3")
        played = await asyncio.gather(trial(ctl), trial(ctl, f"{MODEL}@2", seed=2))
        await publish(bus, make_version(MODEL, 4, "dqn", nets[4], {}))
        await wait_for(lambda: handler.policy.policy_version == 4, timeout=60, what="dqn playing version 4")
        played += await asyncio.gather(trial(ctl, seed=3), trial(ctl, f"{MODEL}@3", seed=4))
        missing, _ = await trial(ctl, f"{MODEL}@99", seed=5)
        unversioned, _ = await trial(ctl, "another-model", seed=6)
        assert handler.pinned.pinned == {}, "every pinned version goes with its last trial"

    for (ended, samples), version in zip(played, (3, 2, 4, 3)):
        assert ended.reason != "error" and len(samples) >= 5, ended
        assert {s.policy_version for s in samples} == {version}
        assert [s.action for s in samples] == greedy(version, samples)
    assert missing.reason == "error" and f"{MODEL}@99 could not be loaded" in missing.details, missing
    assert unversioned.reason == "error" and "a trial may pin a version, NAME@VERSION" in unversioned.details, (
        unversioned
    )
