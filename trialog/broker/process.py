"""The broker's JVM: ``start`` (launched in a session of its own, then probed until it
answers a metadata request), ``stop`` and ``status``, told apart from a stale pid file."""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from trialog.broker.config import HOST, BrokerConfig, BrokerStatus, _last_lines
from trialog.broker.download import ensure_kafka, ensure_tools
from trialog.broker.java import _java_command, find_java
from trialog.broker.storage import _format_storage, _wipe, _write_configs
from trialog.errors import BrokerError
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)


def _read_pid(config: BrokerConfig) -> int | None:
    try:
        return int(config.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _running_pid(config: BrokerConfig) -> int | None:
    """The pid of this data dir's broker if it is alive; a stale pid file (a reused pid included) counts as stopped."""
    pid = _read_pid(config)
    if pid is None or not _alive(pid):
        return None
    command_line = _command_line(pid)
    if "kafka.Kafka" not in command_line or str(config.server_properties) not in command_line:
        return None
    return pid


def _alive(pid: int) -> bool:
    try:
        # Reap the broker if this process launched it and it has exited: a zombie still answers kill(pid, 0).
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Exited, waiting for a parent that is not this process to reap it (another process
    launched it: a test, another `start`). It answers kill(pid, 0) but will never stop again."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False  # no /proc (macOS), or gone meanwhile
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def _command_line(pid: int) -> str:
    if Path("/proc").is_dir():
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return ""
    # No /proc (macOS): ask ps.
    done = subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(pid)], capture_output=True, text=True)
    return done.stdout


def _check_port_free(port: int, config: BrokerConfig) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR as Kafka's own listener has it: a just-closed port in TIME_WAIT is free to Kafka too.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise BrokerError(f"cannot use port {port} on {HOST}: {exc}") from exc
            raise BrokerError(
                f"port {port} on {HOST} is already in use by another process, not by the broker of {config.data_dir}. "
                "Stop that process, or choose other ports with --port / TRIALOG_BROKER_PORT "
                "(and --controller-port / TRIALOG_BROKER_CONTROLLER_PORT)."
            ) from exc


def check_ports_free(config: BrokerConfig) -> None:
    """Raise :class:`BrokerError` naming the port if the broker's or controller's port is taken."""
    for port in (config.port, config.controller_port):
        _check_port_free(port, config)


def _launch(config: BrokerConfig, java: str) -> int:
    command = [*_java_command(config, java), "kafka.Kafka", str(config.server_properties)]
    with config.broker_log.open("ab") as out:
        # posix_spawn, not Popen: the broker is meant to outlive this process, and a Popen
        # object warns when collected that its process still runs. setsid gives the broker a
        # session of its own: it ignores the terminal's Ctrl-C and `stop` can signal its group.
        # Its stdout must not be ours, or `$(trialog broker start)` would wait for it to end.
        pid = os.posix_spawn(
            command[0],
            command,
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, out.fileno(), 1),
                (os.POSIX_SPAWN_DUP2, out.fileno(), 2),
            ],
            setsid=True,
        )
    config.pid_file.write_text(f"{pid}\n")
    state = {
        "pid": pid,
        "bootstrap": config.bootstrap,
        "controller_port": config.controller_port,
        "kafka_version": config.kafka_version,
        "secure": config.secure,
    }
    config.state_file.write_bytes(orjson.dumps(state, option=orjson.OPT_INDENT_2))
    log.info("kafka broker launched", pid=pid, bootstrap=config.bootstrap, data_dir=str(config.data_dir))
    return pid


def _read_state(config: BrokerConfig) -> dict[str, Any]:
    try:
        return orjson.loads(config.state_file.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}


def _log_since(path: Path, offset: int) -> str:
    """What the broker wrote to its log since this start began, so an old run's lines do not mislead."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return _last_lines(handle.read().decode(errors="replace")) or "(nothing yet)"
    except OSError:
        return "(no broker.log)"


# ---------------------------------------------------------------------------- readiness


def _accepts(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


async def _answers_metadata(bootstrap: str, options: dict[str, Any] | None = None) -> bool:
    # Imported here: the rest of this module (and `trialog broker status`) runs without aiokafka loaded.
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError

    admin = AIOKafkaAdminClient(**(options or {"bootstrap_servers": bootstrap}), request_timeout_ms=5000)
    try:
        await admin.start()
        cluster = await admin.describe_cluster()
        return bool(cluster.get("brokers"))
    except (TimeoutError, KafkaError, OSError):
        return False
    finally:
        await admin.close()


def _answers(bootstrap: str, options: dict[str, Any] | None = None) -> bool:
    """True once the broker accepts connections and answers a Kafka metadata request
    (``options``: client options, e.g. the admin's credentials of a secured broker)."""
    if not _accepts(bootstrap):
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_answers_metadata(bootstrap, options))
    # Called from inside an event loop (an async caller that did not use to_thread): probe on a thread of its own.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _answers_metadata(bootstrap, options)).result()


def _probe_options(config: BrokerConfig) -> dict[str, Any] | None:
    if not config.secure:
        return None
    from trialog.broker import secure

    return secure.admin_settings(config).kafka_client_options()


def _storage_size(config: BrokerConfig) -> str:
    """What the broker loads before it answers, said when it is much: thousands of partitions
    left by earlier runs take a broker on a small machine minutes to load."""
    try:
        partitions = sum(1 for entry in config.log_dirs.iterdir() if entry.is_dir())
    except OSError:
        return ""
    return f"its storage holds {partitions} partitions, which it loads first; " if partitions >= 1000 else ""


def _wait_until_answering(config: BrokerConfig, pid: int, bootstrap: str, timeout: float, log_offset: int) -> None:
    deadline = time.monotonic() + timeout
    options = _probe_options(config)
    while not _answers(bootstrap, options):
        if not _alive(pid):
            config.pid_file.unlink(missing_ok=True)
            raise BrokerError(
                f"the Kafka broker exited while starting; see {config.broker_log} (if its storage is the problem, "
                f"`trialog broker start --fresh` starts over with empty storage). Its last lines:\n"
                f"{_log_since(config.broker_log, log_offset)}"
            )
        if time.monotonic() > deadline:
            _terminate(config, pid, timeout=30.0)
            raise BrokerError(
                f"the Kafka broker did not answer on {bootstrap} within {timeout:.0f} s, so it was stopped; "
                f"{_storage_size(config)}try again with a longer --timeout (or start over with empty storage: "
                f"`trialog broker start --fresh`), or see {config.broker_log}. Its last lines:\n"
                f"{_log_since(config.broker_log, log_offset)}"
            )
        time.sleep(0.5)


# ---------------------------------------------------------------------------- commands


def start(config: BrokerConfig | None = None, *, fresh: bool = False, timeout: float = 60.0) -> str:
    """Start the local broker (or find it running) and return its bootstrap address.

    Blocks until the broker answers a metadata request; async callers should run it with
    ``asyncio.to_thread``. ``fresh`` stops the broker and deletes its data first.
    """
    config = config or BrokerConfig.from_env()
    if fresh:
        stop(config)
        _wipe(config)
    pid = _running_pid(config)
    if pid is not None:
        bootstrap = _read_state(config).get("bootstrap", config.bootstrap)
        # It may still be starting (another `start` launched it): wait for it as for our own.
        _wait_until_answering(config, pid, bootstrap, timeout, log_offset=_log_size(config))
        log.info("kafka broker already running", pid=pid, bootstrap=bootstrap)
        return bootstrap
    config.pid_file.unlink(missing_ok=True)
    check_ports_free(config)
    java = find_java()
    ensure_kafka(config)
    passwords = None
    if config.secure:
        from trialog.broker import secure

        ensure_tools(config)
        config.data_dir.mkdir(parents=True, exist_ok=True)
        passwords = secure.prepare(config, config.topic_prefix)
    _write_configs(config, passwords)
    _format_storage(config, java, secure.format_arguments(passwords) if passwords else [])
    log_offset = _log_size(config)
    pid = _launch(config, java)
    _wait_until_answering(config, pid, config.bootstrap, timeout, log_offset)
    if config.secure:
        secure.apply_acls(config, _java_command(config, java), config.topic_prefix)
        print(secure.describe(config), file=sys.stderr)
    log.info(
        "kafka broker ready", pid=pid, bootstrap=config.bootstrap, version=config.kafka_version, secure=config.secure
    )
    return config.bootstrap


def _log_size(config: BrokerConfig) -> int:
    try:
        return config.broker_log.stat().st_size
    except OSError:
        return 0


def stop(config: BrokerConfig | None = None, *, timeout: float = 30.0) -> bool:
    """Stop the local broker; True if one was running, False if it was already stopped."""
    config = config or BrokerConfig.from_env()
    pid = _running_pid(config)
    if pid is None:
        config.pid_file.unlink(missing_ok=True)
        return False
    _terminate(config, pid, timeout)
    return True


def _terminate(config: BrokerConfig, pid: int, timeout: float) -> None:
    """SIGTERM the broker's process group, which makes Kafka shut down cleanly; SIGKILL it if that takes too long."""
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        log.warning("kafka broker did not stop in time; killing it", pid=pid, timeout_s=timeout)
        _signal_group(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.1)
    config.pid_file.unlink(missing_ok=True)
    log.info("kafka broker stopped", pid=pid)


def _signal_group(pid: int, signum: signal.Signals) -> None:
    try:
        # The broker leads its own process group (setsid), so this reaches any child too.
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass


def status(config: BrokerConfig | None = None) -> BrokerStatus:
    """Whether this data dir's broker is running, and with what address and Kafka version."""
    config = config or BrokerConfig.from_env()
    pid = _running_pid(config)
    if pid is None:
        return BrokerStatus(running=False, data_dir=config.data_dir)
    state = _read_state(config)
    return BrokerStatus(
        running=True,
        data_dir=config.data_dir,
        pid=pid,
        bootstrap=state.get("bootstrap", config.bootstrap),
        kafka_version=state.get("kafka_version", config.kafka_version),
    )
