"""The broker's data dir: the configuration rendered at each start, the KRaft storage
formatted once (which is what keeps the datalog across restarts), and ``--fresh``'s wipe."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid

from trialog.broker.config import HOST, BrokerConfig, _last_lines
from trialog.broker.java import _java_command
from trialog.errors import BrokerError
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)

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


def render_server_properties(config: BrokerConfig, passwords: dict[str, str] | None = None) -> str:
    """One combined broker+controller KRaft node on 127.0.0.1 (alone, or a node of a cluster:
    trialog.broker.cluster), internal topics replicated as the cluster allows; with ``passwords``
    (``--secure``), SASL_SSL listeners and ACLs instead of plaintext."""
    if passwords is not None:
        from trialog.broker import secure

        listeners = secure.server_properties(config, passwords)
    else:
        listeners = f"""\
listeners=PLAINTEXT://{HOST}:{config.port},CONTROLLER://{HOST}:{config.controller_port}
advertised.listeners=PLAINTEXT://{HOST}:{config.port}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
"""
    voters = config.voters or f"{config.node_id}@{HOST}:{config.controller_port}"
    # Kafka's internal topics (group offsets, transactions) as replicated as the cluster allows.
    replicas, in_sync = min(3, config.nodes), min(2, config.nodes)
    return f"""\
process.roles=broker,controller
node.id={config.node_id}
controller.quorum.voters={voters}
controller.listener.names=CONTROLLER
{listeners}log.dirs={config.log_dirs}
offsets.topic.replication.factor={replicas}
transaction.state.log.replication.factor={replicas}
transaction.state.log.min.isr={in_sync}
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
    command = [
        *_java_command(config, java),
        "kafka.tools.StorageTool",
        "format",
        "-t",
        cluster_id,
        "-c",
        str(config.server_properties),
        *extra,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise BrokerError(
            f"formatting the Kafka storage in {config.log_dirs} failed (exit {done.returncode}); "
            "`trialog broker start --fresh` starts over with empty storage. "
            f"Kafka said:\n{_last_lines(done.stdout + done.stderr)}"
        )
    if config.secure:
        (config.data_dir / "secure" / "formatted").write_text("with SCRAM users\n")
    log.info("kafka storage formatted", log_dirs=str(config.log_dirs), cluster_id=cluster_id)


def _wipe(config: BrokerConfig) -> None:
    """Delete the data dir, but only one that is ours: --fresh must never delete a folder passed by mistake."""
    if not config.data_dir.exists():
        return
    ours = any((config.data_dir / name).is_file() for name in ("server.properties", "cluster.id", "cluster.json"))
    if not ours and any(config.data_dir.iterdir()):
        raise BrokerError(
            f"refusing to wipe {config.data_dir}: it is not empty and holds no Trialog broker (no server.properties)"
        )
    shutil.rmtree(config.data_dir)
    log.info("broker data wiped", data_dir=str(config.data_dir))
