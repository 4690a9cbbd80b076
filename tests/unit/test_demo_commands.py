"""The commands `trialog demo` prints for afterwards reach the demo's trials: they parse
with the real CLI and carry the demo's topic prefix (``trialog-demo.``) and broker."""

from __future__ import annotations

import shlex

import pytest

from trialog.cli import build_parser
from trialog.settings import from_args
from trialog.tools.demo import demo_settings, follow_up


@pytest.mark.parametrize("bootstrap", ["127.0.0.1:9092", "127.0.0.1:19092"])
@pytest.mark.parametrize("command", ["trial list", "export --implementation human --out demonstrations.parquet"])
def test_a_printed_command_reaches_the_demos_topics(command, bootstrap, monkeypatch):
    for name in ("TRIALOG_TOPIC_PREFIX", "TRIALOG_BOOTSTRAP_SERVERS"):  # a fresh shell's
        monkeypatch.delenv(name, raising=False)
    settings = demo_settings(bootstrap, environ={})
    assert settings.topic_prefix == "trialog-demo."
    words = shlex.split(follow_up(settings, command))
    assert words[0] == "trialog"
    args = build_parser().parse_args(words[1:])
    reached = from_args(args)
    assert (reached.topic_prefix, reached.bootstrap_servers) == ("trialog-demo.", bootstrap)


def test_a_prefix_given_by_the_environment_is_the_one_printed():
    settings = demo_settings("127.0.0.1:9092", environ={"TRIALOG_TOPIC_PREFIX": "mine."})
    assert "--topic-prefix mine." in follow_up(settings, "trial list")
