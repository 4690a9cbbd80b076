"""A real local Apache Kafka broker for development and CI: ``trialog broker start|stop|status``.

The first ``start`` fetches the Kafka jars from Maven Central with Maven (``mvn``) into
a cache outside the repository; every ``start`` then runs a single KRaft node (broker
and controller in one JVM) on 127.0.0.1 whose data directory survives stop/start,
because the Kafka log is Trialog's datalog. ``start`` prints the bootstrap address as
the last line on stdout, so ``export TRIALOG_BOOTSTRAP_SERVERS=$(trialog broker start)``
works; everything else goes to stderr.

Files in the data directory: ``server.properties`` and ``log4j2.properties`` (rendered
at each start), ``cluster.id``, ``logs/`` (Kafka's log dirs: the data), ``broker.log``
(the JVM's output), ``broker.pid`` and ``broker.json`` (what the running broker was
started with).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import concurrent.futures
import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import orjson

from trialog.errors import BrokerError
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)

HOST = "127.0.0.1"
# 4.4.0 is on Maven Central but incompletely published (kafka-tools-api:4.4.0 is
# missing), so its dependencies do not resolve; 4.3.1 is the newest that does.
DEFAULT_KAFKA_VERSION = "4.3.1"
DEFAULT_PORT = 9092
DEFAULT_HEAP = "768m"
MIN_JAVA = 17
# Kafka 4.x's own slf4j is 1.7, which cannot bind to log4j2's slf4j2 provider; pinning
# slf4j-api 2.x as a direct dependency makes Maven's nearest-wins pick it.
_EXTRA_DEPENDENCIES = (
    ("org.slf4j", "slf4j-api", "2.0.17"),
    ("org.apache.logging.log4j", "log4j-slf4j2-impl", "2.24.3"),
    ("org.apache.logging.log4j", "log4j-core", "2.24.3"),
)
_LOG_TAIL_LINES = 30
_MAVEN_TIMEOUT_S = 900.0
_STATUS_STOPPED = 3

_LOG4J2_PROPERTIES = """\
rootLogger.level=WARN
rootLogger.appenderRef.stdout.ref=STDOUT
appender.stdout.type=Console
appender.stdout.name=STDOUT
appender.stdout.layout.type=PatternLayout
appender.stdout.layout.pattern=[%d] %p %m (%c)%n
# Kafka's "Kafka Server started" line, so broker.log shows each start among the warnings.
logger.server.name=kafka.server.KafkaRaftServer
logger.server.level=INFO
"""


@dataclass(frozen=True)
class BrokerConfig:
    """Where and how the local broker runs; :meth:`from_env` fills it from flags, env and defaults."""

    data_dir: Path
    port: int = DEFAULT_PORT
    controller_port: int | None = None  # None: port + 1
    kafka_version: str = DEFAULT_KAFKA_VERSION
    cache_dir: Path = field(default_factory=lambda: _xdg("XDG_CACHE_HOME", ".cache") / "trialog")
    heap: str = DEFAULT_HEAP
    secure: bool = False  # SASL_SSL + ACLs (trialog.broker_secure)
    topic_prefix: str = "trialog."  # whose topics the roles' ACLs cover (secure only)

    def __post_init__(self) -> None:
        if self.controller_port is None:
            object.__setattr__(self, "controller_port", self.port + 1)
        if self.port == self.controller_port:
            raise BrokerError(f"the broker port and the controller port are both {self.port}; give them different values")

    @classmethod
    def from_env(cls, **overrides: Any) -> BrokerConfig:
        """Build a config: overrides (``None`` means "not given") beat env variables, which beat defaults.

        Env: ``TRIALOG_BROKER_DIR``, ``TRIALOG_BROKER_PORT``, ``TRIALOG_BROKER_CONTROLLER_PORT``,
        ``TRIALOG_KAFKA_VERSION``, ``TRIALOG_KAFKA_CACHE``, ``TRIALOG_BROKER_HEAP``.
        """
        given = {key: value for key, value in overrides.items() if value is not None}
        unknown = set(given) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"unknown BrokerConfig field(s): {', '.join(sorted(unknown))}")
        env = os.environ
        port = int(given.get("port") or _env_port("TRIALOG_BROKER_PORT") or DEFAULT_PORT)
        controller_port = given.get("controller_port") or _env_port("TRIALOG_BROKER_CONTROLLER_PORT")
        data_dir = given.get("data_dir") or env.get("TRIALOG_BROKER_DIR") or _xdg("XDG_DATA_HOME", ".local/share") / "trialog" / "broker"
        cache_dir = given.get("cache_dir") or env.get("TRIALOG_KAFKA_CACHE") or _xdg("XDG_CACHE_HOME", ".cache") / "trialog"
        return cls(
            data_dir=Path(data_dir).expanduser().absolute(),
            port=port,
            controller_port=int(controller_port) if controller_port else None,
            kafka_version=given.get("kafka_version") or env.get("TRIALOG_KAFKA_VERSION") or DEFAULT_KAFKA_VERSION,
            cache_dir=Path(cache_dir).expanduser().absolute(),
            heap=given.get("heap") or env.get("TRIALOG_BROKER_HEAP") or DEFAULT_HEAP,
            secure=bool(given.get("secure", False)),
            topic_prefix=given.get("topic_prefix") or "trialog.",
        )

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def libs_dir(self) -> Path:
        """The cached jars of this Kafka version (one folder per version, so versions never mix)."""
        return self.cache_dir / f"kafka-{self.kafka_version}" / "libs"

    @property
    def tools_dir(self) -> Path:
        """Kafka's command-line tools jar (``AclCommand``), fetched for ``--secure`` only."""
        return self.cache_dir / f"kafka-{self.kafka_version}" / "tools"

    @property
    def server_properties(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def log_dirs(self) -> Path:
        return self.data_dir / "logs"

    @property
    def broker_log(self) -> Path:
        return self.data_dir / "broker.log"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "broker.pid"

    @property
    def state_file(self) -> Path:
        return self.data_dir / "broker.json"


@dataclass(frozen=True)
class BrokerStatus:
    """What ``status`` found: a running broker's pid, address and version, or that it is stopped."""

    running: bool
    data_dir: Path
    pid: int | None = None
    bootstrap: str | None = None
    kafka_version: str | None = None

    def describe(self) -> str:
        if not self.running:
            return f"stopped (data dir {self.data_dir})"
        return f"running: pid {self.pid}, address {self.bootstrap}, data dir {self.data_dir}, Kafka {self.kafka_version}"


def _xdg(variable: str, fallback: str) -> Path:
    # The XDG spec says an empty variable means "use the default".
    return Path(os.environ.get(variable) or Path.home() / fallback)


def _env_port(variable: str) -> int | None:
    raw = os.environ.get(variable)
    if not raw:
        return None
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise BrokerError(f"{variable}={raw!r} is not a port number (1-65535)")
    return int(raw)


# ---------------------------------------------------------------------------- Java


def find_java() -> str:
    """The ``java`` to run Kafka with ($JAVA_HOME's, as Kafka's own scripts do, else the PATH's), checked to be 17+."""
    java_home = os.environ.get("JAVA_HOME")
    home_java = Path(java_home) / "bin" / "java" if java_home else None
    java = str(home_java) if home_java and home_java.is_file() else shutil.which("java")
    if not java:
        raise BrokerError(
            f"Kafka needs Java {MIN_JAVA} or newer, and there is no `java` on PATH. "
            f"Install a JDK or JRE {MIN_JAVA}+ (e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME."
        )
    output = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    version = java_version_string(output)
    if java_major(version) < MIN_JAVA:
        raise BrokerError(
            f"Kafka needs Java {MIN_JAVA} or newer; {java} is Java {version}. "
            f"Install Java {MIN_JAVA}+ and put it on PATH (or set JAVA_HOME)."
        )
    return java


def java_version_string(version_output: str) -> str:
    """The quoted version in ``java -version``'s output, e.g. ``17.0.15`` from ``openjdk version "17.0.15" 2025-04-15``."""
    match = re.search(r'version "([^"]+)"', version_output)
    if not match:
        raise BrokerError(f"cannot tell the Java version from `java -version`, which said: {version_output.strip()!r}")
    return match.group(1)


def java_major(version: str) -> int:
    """The major version: ``17.0.15`` → 17, ``21`` → 21, ``21-ea`` → 21, and the old scheme ``1.8.0_392`` → 8."""
    parts = re.split(r"[._+\-]", version)
    if not parts[0].isdigit():
        raise BrokerError(f"cannot tell the Java major version from {version!r}")
    if parts[0] == "1" and len(parts) > 1 and parts[1].isdigit():
        return int(parts[1])
    return int(parts[0])


# ---------------------------------------------------------------------------- Kafka jars


def ensure_kafka(config: BrokerConfig) -> Path:
    """The folder of Kafka's jars, fetched with Maven the first time."""
    if _jars_cached(config):
        return config.libs_dir
    mvn = shutil.which("mvn")
    if not mvn:
        raise BrokerError(
            f"Kafka {config.kafka_version} is not cached in {config.libs_dir.parent} and Maven (`mvn`) is not on PATH "
            "to fetch it. Install Maven (e.g. `apt-get install maven`); it is needed once, for the first start."
        )
    print(f"fetching Kafka {config.kafka_version} with Maven (first time only)…", file=sys.stderr, flush=True)
    config.cache_dir.mkdir(parents=True, exist_ok=True)
    # Fetch into a temporary folder beside the cache and rename it into place, so an
    # interrupted or failed fetch never looks like a cached one.
    with tempfile.TemporaryDirectory(prefix=f".kafka-{config.kafka_version}-", dir=config.cache_dir) as tmp:
        staging = Path(tmp) / "kafka"
        _maven_copy_dependencies(mvn, config.kafka_version, Path(tmp), staging / "libs")
        try:
            staging.rename(config.libs_dir.parent)
        except OSError as exc:
            # Another start fetched the same version meanwhile; its copy is as good as ours.
            if not _jars_cached(config):
                raise BrokerError(f"could not move the fetched jars into {config.libs_dir.parent}: {exc}") from exc
    log.info("kafka fetched", version=config.kafka_version, libs=str(config.libs_dir))
    return config.libs_dir


def ensure_tools(config: BrokerConfig) -> Path:
    """Kafka's tools jar (for ``AclCommand``), beside the broker's jars; the rest of what it
    needs is already there, so only that jar is fetched."""
    jar = config.tools_dir / f"kafka-tools-{config.kafka_version}.jar"
    if jar.is_file():
        return config.tools_dir
    mvn = shutil.which("mvn")
    if not mvn:
        raise BrokerError("`trialog broker start --secure` fetches Kafka's tools jar once with Maven (`mvn`), which is not on PATH")
    with tempfile.TemporaryDirectory(prefix=".kafka-tools-", dir=config.cache_dir) as tmp:
        staging = Path(tmp) / "tools"
        _maven_copy_dependencies(mvn, config.kafka_version, Path(tmp), staging, artifacts=(("org.apache.kafka", "kafka-tools", config.kafka_version),), transitive=False)
        try:
            staging.rename(config.tools_dir)
        except OSError as exc:
            if not jar.is_file():
                raise BrokerError(f"could not move Kafka's tools jar into {config.tools_dir}: {exc}") from exc
    return config.tools_dir


def _jars_cached(config: BrokerConfig) -> bool:
    return (config.libs_dir / f"kafka_2.13-{config.kafka_version}.jar").is_file()


def _maven_copy_dependencies(mvn: str, kafka_version: str, workdir: Path, output: Path, *, artifacts=None, transitive: bool = True) -> None:
    pom = workdir / "pom.xml"
    pom.write_text(_render_pom(kafka_version, artifacts))
    command = [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={output}", "-DincludeScope=runtime"]
    if not transitive:
        command.append("-DexcludeTransitive=true")
    try:
        done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise BrokerError(
            f"Maven did not finish fetching Kafka {kafka_version} within {_MAVEN_TIMEOUT_S:.0f} s; check the network and try again"
        ) from exc
    if done.returncode != 0:
        said = _maven_problem(done.stdout + done.stderr)
        raise BrokerError(
            f"Maven could not fetch Kafka {kafka_version} (exit {done.returncode}). Check that {kafka_version} is a Kafka "
            f"release fully published on Maven Central and that Maven reaches its repositories (~/.m2/settings.xml). "
            f"Maven said:\n{said}"
        )


def _maven_problem(output: str) -> str:
    """Maven's error without the advice boilerplate that follows its first bare ``[ERROR]`` line."""
    # Maven 3.8 writes colour resets even in batch mode.
    lines = re.sub(r"\x1b\[[0-9;]*m", "", output).rstrip().splitlines()
    if "[ERROR]" in (line.strip() for line in lines):
        lines = lines[: [line.strip() for line in lines].index("[ERROR]")]
    return _last_lines("\n".join(lines))


def _render_pom(kafka_version: str, artifacts=None) -> str:
    dependencies = artifacts or (("org.apache.kafka", "kafka_2.13", kafka_version), *_EXTRA_DEPENDENCIES)
    rendered = "\n".join(
        f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}</version></dependency>"
        for group, artifact, version in dependencies
    )
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.trialog</groupId>
  <artifactId>kafka-fetch</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{rendered}
  </dependencies>
</project>
"""


# ---------------------------------------------------------------------------- storage


def render_server_properties(config: BrokerConfig, passwords: dict[str, str] | None = None) -> str:
    """One combined broker+controller KRaft node on 127.0.0.1, with single-node replication
    settings; with ``passwords`` (``--secure``), SASL_SSL listeners and ACLs instead of plaintext."""
    if passwords is not None:
        from trialog import broker_secure

        listeners = broker_secure.server_properties(config, passwords)
    else:
        listeners = f"""\
listeners=PLAINTEXT://{HOST}:{config.port},CONTROLLER://{HOST}:{config.controller_port}
advertised.listeners=PLAINTEXT://{HOST}:{config.port}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
"""
    return f"""\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{HOST}:{config.controller_port}
controller.listener.names=CONTROLLER
{listeners}log.dirs={config.log_dirs}
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
num.partitions=1
auto.create.topics.enable=false
"""


def new_cluster_id() -> str:
    """A Kafka cluster id: 22 base64url characters of a random UUID."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # Kafka avoids ids starting with "-" because command-line parsers take them for options.
        if not cluster_id.startswith("-"):
            return cluster_id


def _write_configs(config: BrokerConfig, passwords: dict[str, str] | None = None) -> None:
    # Rendered at every start, so a changed --port applies to the existing storage.
    config.data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(config.server_properties, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # may hold the admin password
    with os.fdopen(fd, "w") as f:
        f.write(render_server_properties(config, passwords))
    (config.data_dir / "log4j2.properties").write_text(_LOG4J2_PROPERTIES)


def _format_storage(config: BrokerConfig, java: str, extra: list[str] = ()) -> None:
    """Format the KRaft log dirs once; later starts reuse them, which is what keeps the datalog."""
    if (config.log_dirs / "meta.properties").is_file():
        if config.secure and not (config.data_dir / "secure" / "formatted").is_file():
            raise BrokerError(
                f"the storage in {config.log_dirs} was formatted without --secure, so it has no users: "
                "give --secure a data dir of its own (--data-dir), or start over with --fresh"
            )
        return
    id_file = config.data_dir / "cluster.id"
    if not id_file.is_file():
        id_file.write_text(new_cluster_id() + "\n")
    cluster_id = id_file.read_text().strip()
    command = [*_java_command(config, java), "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config.server_properties), *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise BrokerError(
            f"formatting the Kafka storage in {config.log_dirs} failed (exit {done.returncode}); "
            f"`trialog broker start --fresh` starts over with empty storage. Kafka said:\n{_last_lines(done.stdout + done.stderr)}"
        )
    if config.secure:
        (config.data_dir / "secure" / "formatted").write_text("with SCRAM users\n")
    log.info("kafka storage formatted", log_dirs=str(config.log_dirs), cluster_id=cluster_id)


def _java_command(config: BrokerConfig, java: str) -> list[str]:
    log4j2 = config.data_dir / "log4j2.properties"
    classpath = f"{config.libs_dir}/*" + (f":{config.tools_dir}/*" if config.tools_dir.is_dir() else "")
    return [java, f"-Xmx{config.heap}", f"-Dlog4j2.configurationFile={log4j2}", "-cp", classpath]


def _wipe(config: BrokerConfig) -> None:
    """Delete the data dir, but only one that is ours: --fresh must never delete a folder passed by mistake."""
    if not config.data_dir.exists():
        return
    ours = config.server_properties.is_file() or (config.data_dir / "cluster.id").is_file()
    if not ours and any(config.data_dir.iterdir()):
        raise BrokerError(f"refusing to wipe {config.data_dir}: it is not empty and holds no Trialog broker (no server.properties)")
    shutil.rmtree(config.data_dir)
    log.info("broker data wiped", data_dir=str(config.data_dir))


# ---------------------------------------------------------------------------- process


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
    return True


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
    state = {"pid": pid, "bootstrap": config.bootstrap, "controller_port": config.controller_port, "kafka_version": config.kafka_version, "secure": config.secure}
    config.state_file.write_bytes(orjson.dumps(state, option=orjson.OPT_INDENT_2))
    log.info("kafka broker launched", pid=pid, bootstrap=config.bootstrap, data_dir=str(config.data_dir))
    return pid


def _read_state(config: BrokerConfig) -> dict[str, Any]:
    try:
        return orjson.loads(config.state_file.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}


def _last_lines(text: str, count: int = _LOG_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-count:])


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
    except (KafkaError, OSError, asyncio.TimeoutError):
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
    from trialog import broker_secure

    return broker_secure.admin_settings(config).kafka_client_options()


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
                f"try again with a longer --timeout, or see {config.broker_log}. Its last lines:\n"
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
        from trialog import broker_secure

        ensure_tools(config)
        config.data_dir.mkdir(parents=True, exist_ok=True)
        passwords = broker_secure.prepare(config, config.topic_prefix)
    _write_configs(config, passwords)
    _format_storage(config, java, broker_secure.format_arguments(passwords) if passwords else [])
    log_offset = _log_size(config)
    pid = _launch(config, java)
    _wait_until_answering(config, pid, config.bootstrap, timeout, log_offset)
    if config.secure:
        broker_secure.apply_acls(config, _java_command(config, java), config.topic_prefix)
        print(broker_secure.describe(config), file=sys.stderr)
    log.info("kafka broker ready", pid=pid, bootstrap=config.bootstrap, version=config.kafka_version, secure=config.secure)
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


# ---------------------------------------------------------------------------- CLI


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    """Register ``broker start|stop|status`` on the CLI's subparsers."""
    broker = subparsers.add_parser("broker", help="run a local Apache Kafka broker for development and CI")
    commands = broker.add_subparsers(dest="broker_command", required=True, metavar="{start,stop,status}")

    start_parser = commands.add_parser("start", help="start the broker (fetching Kafka the first time) and print its bootstrap address")
    _add_location_flags(start_parser)
    start_parser.add_argument("--port", type=int, help=f"broker port on {HOST} (env TRIALOG_BROKER_PORT, default {DEFAULT_PORT})")
    start_parser.add_argument("--controller-port", type=int, help="KRaft controller port (env TRIALOG_BROKER_CONTROLLER_PORT, default port+1)")
    start_parser.add_argument("--kafka-version", help=f"Apache Kafka version (env TRIALOG_KAFKA_VERSION, default {DEFAULT_KAFKA_VERSION})")
    start_parser.add_argument("--heap", help=f"JVM maximum heap, as for -Xmx (env TRIALOG_BROKER_HEAP, default {DEFAULT_HEAP})")
    start_parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the broker to answer (default 60)")
    start_parser.add_argument("--fresh", action="store_true", help="stop the broker and delete its data before starting")
    start_parser.add_argument(
        "--secure",
        action="store_true",
        help="SASL_SSL (SCRAM-SHA-512) with certificates made on the fly, StandardAuthorizer and one principal per role with "
        "least-privilege ACLs; writes each role's client settings to DATA_DIR/secure/ (docs/security.md). Give it a data dir of its own",
    )
    start_parser.add_argument("--topic-prefix", help="the deployment's topic prefix the roles' ACLs cover (--secure; default trialog.)")
    start_parser.set_defaults(func=_cli_start)

    stop_parser = commands.add_parser("stop", help="stop the broker (its data stays)")
    _add_location_flags(stop_parser)
    stop_parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a clean shutdown before killing it (default 30)")
    stop_parser.set_defaults(func=_cli_stop)

    status_parser = commands.add_parser("status", help="say whether the broker runs; exit 0 if it does, 3 if not")
    _add_location_flags(status_parser)
    status_parser.add_argument("--json", action="store_true", help="one JSON object: running, pid, bootstrap, data_dir, kafka_version")
    status_parser.set_defaults(func=_cli_status)


def _add_location_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help="broker data dir (env TRIALOG_BROKER_DIR, default ~/.local/share/trialog/broker)")


def _config_from_args(args: argparse.Namespace) -> BrokerConfig:
    names = ("data_dir", "port", "controller_port", "kafka_version", "heap", "secure", "topic_prefix")
    return BrokerConfig.from_env(**{name: getattr(args, name, None) for name in names})


def _cli_start(args: argparse.Namespace) -> int:
    print(start(_config_from_args(args), fresh=args.fresh, timeout=args.timeout), flush=True)
    return 0


def _cli_stop(args: argparse.Namespace) -> int:
    config = _config_from_args(args)
    stopped = stop(config, timeout=args.timeout)
    print("broker stopped" if stopped else f"broker is not running (data dir {config.data_dir})", file=sys.stderr)
    return 0


def _cli_status(args: argparse.Namespace) -> int:
    found = status(_config_from_args(args))
    if args.json:
        from trialog.commands.parts import fields_of, json_line

        print(json_line(fields_of(found)))
    else:
        print(found.describe())
    return 0 if found.running else _STATUS_STOPPED
