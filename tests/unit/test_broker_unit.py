"""The local broker's logic that needs no broker: config, rendering, Java/Maven checks, ports, CLI wiring."""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import stat
from pathlib import Path

import pytest

from tests.conftest import free_ports
from trialog.broker import download, process, storage
from trialog.broker.config import BrokerConfig
from trialog.broker.java import find_java, java_major, java_version_string
from trialog.commands import broker as broker_commands
from trialog.errors import BrokerError


def _config(tmp_path: Path, **overrides) -> BrokerConfig:
    return BrokerConfig(data_dir=tmp_path / "data", cache_dir=tmp_path / "cache", **overrides)


def _script(bin_dir: Path, name: str, body: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def listening_port():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


# ---------------------------------------------------------------- config


def test_from_env_defaults_follow_xdg(monkeypatch, tmp_path):
    for name in ("DIR", "PORT", "CONTROLLER_PORT", "HEAP"):
        monkeypatch.delenv(f"TRIALOG_BROKER_{name}", raising=False)
    for name in ("VERSION", "CACHE"):
        monkeypatch.delenv(f"TRIALOG_KAFKA_{name}", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    config = BrokerConfig.from_env()
    assert config.data_dir == tmp_path / "share" / "trialog" / "broker"
    assert config.libs_dir == tmp_path / "cache" / "trialog" / "kafka-4.3.1" / "libs"
    assert (config.port, config.controller_port, config.heap) == (9092, 9093, "768m")
    assert config.bootstrap == "127.0.0.1:9092"


def test_from_env_reads_env_and_overrides_win(monkeypatch, tmp_path):
    monkeypatch.setenv("TRIALOG_BROKER_DIR", str(tmp_path / "env-data"))
    monkeypatch.setenv("TRIALOG_BROKER_PORT", "19092")
    monkeypatch.setenv("TRIALOG_KAFKA_VERSION", "4.2.0")
    monkeypatch.setenv("TRIALOG_KAFKA_CACHE", str(tmp_path / "jars"))
    config = BrokerConfig.from_env(port=None, heap="1g")
    assert (config.data_dir, config.port, config.controller_port) == (tmp_path / "env-data", 19092, 19093)
    assert config.libs_dir == tmp_path / "jars" / "kafka-4.2.0" / "libs"
    assert config.heap == "1g"
    config = BrokerConfig.from_env(data_dir=tmp_path / "flag-data", port=20000, controller_port=30000)
    assert (config.data_dir, config.port, config.controller_port) == (tmp_path / "flag-data", 20000, 30000)


def test_bad_port_settings_are_clear(monkeypatch, tmp_path):
    monkeypatch.setenv("TRIALOG_BROKER_PORT", "ninety")
    with pytest.raises(BrokerError, match="TRIALOG_BROKER_PORT"):
        BrokerConfig.from_env(data_dir=tmp_path)
    with pytest.raises(BrokerError, match="both 9000"):
        _config(tmp_path, port=9000, controller_port=9000)


def test_server_properties_is_a_single_kraft_node(tmp_path):
    config = _config(tmp_path, port=19092, controller_port=19999)
    lines = storage.render_server_properties(config).splitlines()
    assert "process.roles=broker,controller" in lines
    assert "controller.quorum.voters=1@127.0.0.1:19999" in lines
    assert "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19999" in lines
    assert "advertised.listeners=PLAINTEXT://127.0.0.1:19092" in lines
    assert f"log.dirs={tmp_path / 'data' / 'logs'}" in lines
    assert "offsets.topic.replication.factor=1" in lines
    assert "auto.create.topics.enable=false" in lines


def test_cluster_id_is_22_base64url_characters():
    for _ in range(200):
        cluster_id = storage.new_cluster_id()
        assert len(cluster_id) == 22
        assert set(cluster_id) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        assert not cluster_id.startswith("-")


# ---------------------------------------------------------------- Java


@pytest.mark.parametrize(
    ("version", "major"), [("17.0.15", 17), ("1.8.0_392", 8), ("21", 21), ("21-ea", 21), ("11.0.2+9", 11)]
)
def test_java_major(version, major):
    assert java_major(version) == major


def test_java_version_string_from_real_outputs():
    assert java_version_string('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment') == "17.0.15"
    assert java_version_string('java version "1.8.0_392"\nJava(TM) SE Runtime Environment') == "1.8.0_392"
    with pytest.raises(BrokerError, match="cannot tell the Java version"):
        java_version_string("command not found")


def test_no_java_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(BrokerError, match="no `java` on PATH"):
        find_java()


def test_old_java_is_a_clear_error(monkeypatch, tmp_path):
    _script(tmp_path / "bin", "java", """echo 'java version "1.8.0_392"' >&2\n""")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(BrokerError, match=r"Java 17 or newer.*1\.8\.0_392"):
        find_java()


def test_java_home_wins_over_path(monkeypatch, tmp_path):
    java = _script(tmp_path / "jdk" / "bin", "java", """echo 'openjdk version "21.0.1" 2023-10-17' >&2\n""")
    _script(tmp_path / "bin", "java", """echo 'java version "1.8.0_392"' >&2\n""")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert find_java() == str(java)


def test_start_without_java_fails_before_launching(monkeypatch, tmp_path):
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "java" else real_which(name))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    port, controller_port = free_ports(2)
    with pytest.raises(BrokerError, match="Java 17"):
        process.start(_config(tmp_path, port=port, controller_port=controller_port))
    assert not (tmp_path / "data" / "broker.pid").exists()


# ---------------------------------------------------------------- Maven and the jar cache


def test_no_maven_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(BrokerError, match=r"Maven \(`mvn`\) is not on PATH"):
        download.ensure_kafka(_config(tmp_path))


FAKE_MVN = """\
for arg in "$@"; do
  case "$arg" in -DoutputDirectory=*) out="${arg#-DoutputDirectory=}";; esac
done
echo call >> "$MVN_CALLS"
mkdir -p "$out" && touch "$out/kafka_2.13-4.3.1.jar" "$out/kafka-clients-4.3.1.jar"
"""


def test_maven_fetches_once_into_the_cache(monkeypatch, tmp_path):
    _script(tmp_path / "bin", "mvn", FAKE_MVN)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MVN_CALLS", str(tmp_path / "calls"))
    config = _config(tmp_path)
    assert download.ensure_kafka(config) == config.libs_dir
    assert download.ensure_kafka(config) == config.libs_dir
    assert (tmp_path / "calls").read_text().count("call") == 1
    assert sorted(p.name for p in config.libs_dir.iterdir()) == ["kafka-clients-4.3.1.jar", "kafka_2.13-4.3.1.jar"]
    assert [p.name for p in config.cache_dir.iterdir()] == ["kafka-4.3.1"]  # no staging folder left behind


def test_failed_maven_fetch_leaves_no_cache(monkeypatch, tmp_path):
    # As Maven 3.8 says it: a colour reset, the problem, then advice after a bare "[ERROR]".
    said = (
        r"\033[0m[ERROR] Could not resolve org.apache.kafka:kafka-tools-api:jar:4.4.0\n"
        r"[ERROR] \n[ERROR] Re-run Maven with -X\n"
    )
    _script(tmp_path / "bin", "mvn", f"printf '{said}'\nexit 1\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    config = _config(tmp_path, kafka_version="4.4.0")
    with pytest.raises(BrokerError, match="Maven could not fetch Kafka 4.4.0") as raised:
        download.ensure_kafka(config)
    assert str(raised.value).endswith(
        "Maven said:\n[ERROR] Could not resolve org.apache.kafka:kafka-tools-api:jar:4.4.0"
    )
    assert list(config.cache_dir.iterdir()) == []


def test_pom_asks_for_kafka_and_a_working_log_binding():
    pom = download._render_pom("4.3.1")
    assert "<artifactId>kafka_2.13</artifactId><version>4.3.1</version>" in pom
    assert "<artifactId>slf4j-api</artifactId><version>2.0.17</version>" in pom
    assert "<artifactId>log4j-slf4j2-impl</artifactId>" in pom
    assert "<packaging>pom</packaging>" in pom


# ---------------------------------------------------------------- ports, pid files, wipe


def test_taken_port_is_a_clear_error(tmp_path, listening_port):
    with pytest.raises(BrokerError, match=f"port {listening_port} .*already in use"):
        process.check_ports_free(_config(tmp_path, port=listening_port))


def test_taken_controller_port_is_a_clear_error(tmp_path, listening_port):
    with pytest.raises(BrokerError, match=f"port {listening_port} "):
        process.check_ports_free(_config(tmp_path, port=free_ports(1)[0], controller_port=listening_port))


def test_start_on_a_taken_port_fails_before_anything_else(tmp_path, listening_port):
    with pytest.raises(BrokerError, match=f"port {listening_port}"):
        process.start(_config(tmp_path, port=listening_port))


def test_status_and_stop_of_a_stopped_broker(tmp_path):
    config = _config(tmp_path)
    found = process.status(config)
    assert not found.running and found.pid is None
    assert "stopped" in found.describe()
    assert process.stop(config) is False


def test_stale_pid_file_counts_as_stopped(tmp_path):
    config = _config(tmp_path)
    config.data_dir.mkdir(parents=True)
    # A live pid that is not a Kafka broker (this very test process): a reused pid must not count.
    config.pid_file.write_text(f"{os.getpid()}\n")
    assert not process.status(config).running
    assert process.stop(config) is False
    assert not config.pid_file.exists()


def test_fresh_refuses_to_wipe_a_foreign_folder(tmp_path):
    config = _config(tmp_path)
    config.data_dir.mkdir(parents=True)
    (config.data_dir / "thesis.tex").write_text("precious")
    with pytest.raises(BrokerError, match="refusing to wipe"):
        storage._wipe(config)
    assert (config.data_dir / "thesis.tex").exists()


def test_fresh_wipes_our_own_folder(tmp_path):
    config = _config(tmp_path)
    config.log_dirs.mkdir(parents=True)
    config.server_properties.write_text(storage.render_server_properties(config))
    storage._wipe(config)
    assert not config.data_dir.exists()


# ---------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trialog")
    broker_commands.add(parser.add_subparsers(dest="command", required=True))
    return parser


def test_cli_status_of_a_stopped_broker_exits_3(tmp_path, capsys):
    args = _parser().parse_args(["broker", "status", "--data-dir", str(tmp_path)])
    assert args.func(args) == 3
    assert "stopped" in capsys.readouterr().out


def test_cli_stop_of_a_stopped_broker_exits_0(tmp_path, capsys):
    args = _parser().parse_args(["broker", "stop", "--data-dir", str(tmp_path)])
    assert args.func(args) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "not running" in captured.err


def test_cli_start_flags_reach_the_config(tmp_path):
    args = _parser().parse_args(
        ["broker", "start", "--data-dir", str(tmp_path), "--port", "19500", "--kafka-version", "4.2.0"]
        + ["--heap", "1g", "--fresh", "--timeout", "90"]
    )
    config = broker_commands._config_from_args(args)
    assert (config.data_dir, config.port, config.controller_port) == (tmp_path, 19500, 19501)
    assert (config.kafka_version, config.heap) == ("4.2.0", "1g")
    assert args.fresh and args.timeout == 90


def test_cli_needs_a_broker_command():
    with pytest.raises(SystemExit):
        _parser().parse_args(["broker"])


def test_a_broker_slow_to_answer_says_how_much_storage_it_loads(tmp_path):
    config = _config(tmp_path)
    assert process._storage_size(config) == ""  # no storage yet
    for index in range(1200):
        (config.log_dirs / f"test-{index}.events-0").mkdir(parents=True)
    assert process._storage_size(config).startswith("its storage holds 1200 partitions")
