"""Where and how the local broker runs (:class:`BrokerConfig`: flags, env and defaults),
and what ``status`` reports (:class:`BrokerStatus`).

Files in the data directory: ``server.properties`` and ``log4j2.properties`` (rendered
at each start), ``cluster.id``, ``logs/`` (Kafka's log dirs: the data), ``broker.log``
(the JVM's output), ``broker.pid`` and ``broker.json`` (what the running broker was
started with).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from trialog.errors import BrokerError

HOST = "127.0.0.1"
# 4.4.0 is on Maven Central but incompletely published (kafka-tools-api:4.4.0 is
# missing), so its dependencies do not resolve; 4.3.1 is the newest that does.
DEFAULT_KAFKA_VERSION = "4.3.1"
DEFAULT_PORT = 9092
DEFAULT_HEAP = "768m"
_LOG_TAIL_LINES = 30


@dataclass(frozen=True)
class BrokerConfig:
    """Where and how the local broker runs; :meth:`from_env` fills it from flags, env and defaults."""

    data_dir: Path
    port: int = DEFAULT_PORT
    controller_port: int | None = None  # None: port + 1
    kafka_version: str = DEFAULT_KAFKA_VERSION
    cache_dir: Path = field(default_factory=lambda: _xdg("XDG_CACHE_HOME", ".cache") / "trialog")
    heap: str = DEFAULT_HEAP
    secure: bool = False  # SASL_SSL + ACLs (trialog.broker.secure)
    topic_prefix: str = "trialog."  # whose topics the roles' ACLs cover (secure only)
    # A node of a cluster (trialog.broker.cluster): its id, the controller quorum of all
    # nodes ("id@host:port,..."; "" for a single node, its own voter), and how many nodes there are.
    node_id: int = 1
    voters: str = ""
    nodes: int = 1

    def __post_init__(self) -> None:
        if self.controller_port is None:
            object.__setattr__(self, "controller_port", self.port + 1)
        if self.port == self.controller_port:
            raise BrokerError(
                f"the broker port and the controller port are both {self.port}; give them different values"
            )

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
        data_dir = (
            given.get("data_dir")
            or env.get("TRIALOG_BROKER_DIR")
            or _xdg("XDG_DATA_HOME", ".local/share") / "trialog" / "broker"
        )
        cache_dir = (
            given.get("cache_dir") or env.get("TRIALOG_KAFKA_CACHE") or _xdg("XDG_CACHE_HOME", ".cache") / "trialog"
        )
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
        return (
            f"running: pid {self.pid}, address {self.bootstrap}, data dir {self.data_dir}, Kafka {self.kafka_version}"
        )


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


def _last_lines(text: str, count: int = _LOG_TAIL_LINES) -> str:
    """The tail of a tool's output (Maven's, Kafka's, broker.log), as errors quote it."""
    return "\n".join(text.rstrip().splitlines()[-count:])
