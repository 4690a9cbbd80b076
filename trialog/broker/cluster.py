"""A cluster of local KRaft nodes on one machine: ``trialog broker start --nodes 3``.

Each node is a broker and a controller in one JVM, as the single node is, with a data
dir of its own (``DATA_DIR/node-K``) and two ports: node K listens on ``port + 2(K-1)``
and its controller on the port after it. The controllers form one quorum (static
voters), so the cluster runs while a majority of its nodes do; Kafka's internal topics
are replicated on three nodes (two in sync), and ``trialog topics create`` replicates
Trialog's the same way (:func:`trialog.bus.kafka.KafkaBus.create_topics`).

What a failover test needs, and an operator would try: ``start`` starts the nodes that
are not running (a node killed on purpose comes back with the data it had), ``stop`` stops
all of them, ``status`` says which run. ``DATA_DIR/cluster.json`` records the cluster's
shape, so ``stop`` and ``status`` know there is a cluster without being told again.
"""

from __future__ import annotations

import dataclasses
import shutil
import signal

import orjson

from trialog.broker import process
from trialog.broker.config import HOST, BrokerConfig, BrokerStatus
from trialog.broker.download import ensure_kafka
from trialog.broker.java import find_java
from trialog.broker.storage import _format_storage, _wipe, _write_configs, new_cluster_id
from trialog.errors import BrokerError
from trialog.telemetry.logs import get_logger

log = get_logger(__name__)

MAX_NODES = 9


def _shape_file(base: BrokerConfig):
    return base.data_dir / "cluster.json"


def recorded_nodes(base: BrokerConfig) -> int:
    """How many nodes the cluster in this data dir has (1: a single broker, or nothing yet)."""
    try:
        return int(orjson.loads(_shape_file(base).read_bytes())["nodes"])
    except (OSError, ValueError, KeyError, TypeError):
        return 1


def node_configs(base: BrokerConfig, nodes: int) -> list[BrokerConfig]:
    """The nodes of a cluster of ``nodes`` started from ``base``'s data dir and port."""
    if not 1 <= nodes <= MAX_NODES:
        raise BrokerError(f"--nodes must be between 1 and {MAX_NODES}, not {nodes}")
    if nodes == 1:
        return [base]
    if base.secure:
        raise BrokerError("--secure starts a single node; a cluster (--nodes) is plaintext")
    if base.controller_port != base.port + 1:
        raise BrokerError(
            f"with --nodes, node K takes ports {base.port} + 2(K-1) and the one after it for its controller; "
            "--controller-port cannot be chosen"
        )
    ports = [base.port + 2 * k for k in range(nodes)]
    voters = ",".join(f"{k + 1}@{HOST}:{port + 1}" for k, port in enumerate(ports))
    return [
        dataclasses.replace(
            base,
            data_dir=base.data_dir / f"node-{k + 1}",
            port=port,
            controller_port=port + 1,
            node_id=k + 1,
            voters=voters,
            nodes=nodes,
        )
        for k, port in enumerate(ports)
    ]


def bootstrap(configs: list[BrokerConfig]) -> str:
    return ",".join(c.bootstrap for c in configs)


def start(base: BrokerConfig, nodes: int, *, fresh: bool = False, timeout: float = 60.0) -> str:
    """Start every node of the cluster that is not running (all of them the first time) and
    return the bootstrap list ``host:port,host:port,...`` once each answers."""
    configs = node_configs(base, nodes)
    if fresh:
        stop(base)
        _wipe(base)
    recorded = recorded_nodes(base)
    if _shape_file(base).is_file() and recorded != nodes:
        raise BrokerError(
            f"{base.data_dir} holds a cluster of {recorded} nodes; start it with --nodes {recorded}, "
            "or start over with --fresh"
        )
    if not _shape_file(base).is_file() and base.server_properties.is_file():
        raise BrokerError(f"{base.data_dir} holds a single broker; give the cluster a data dir of its own, or --fresh")
    base.data_dir.mkdir(parents=True, exist_ok=True)
    _shape_file(base).write_bytes(orjson.dumps({"nodes": nodes, "port": base.port}))
    id_file = base.data_dir / "cluster.id"
    if not id_file.is_file():
        id_file.write_text(new_cluster_id() + "\n")
    java = find_java()
    ensure_kafka(base)
    launched = []
    for config in configs:
        if process._running_pid(config) is not None:
            continue
        config.data_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(id_file, config.data_dir / "cluster.id")  # one cluster: every node formatted with its id
        config.pid_file.unlink(missing_ok=True)
        process.check_ports_free(config)
        _write_configs(config)
        _format_storage(config, java)
        launched.append((config, process._log_size(config), process._launch(config, java)))
    # A node answers once the quorum has a leader: every node is launched before any is awaited.
    for config, log_offset, pid in launched:
        process._wait_until_answering(config, pid, config.bootstrap, timeout, log_offset)
    log.info("kafka cluster ready", nodes=nodes, bootstrap=bootstrap(configs), started=len(launched))
    return bootstrap(configs)


def stop(base: BrokerConfig, *, timeout: float = 30.0) -> bool:
    """Stop every node; True if any was running. All are told at once: a node shutting down
    cleanly waits for the controller quorum, which the last ones would no longer have."""
    configs = node_configs(base, recorded_nodes(base))
    for config in configs:
        pid = process._running_pid(config)
        if pid is not None:
            process._signal_group(pid, signal.SIGTERM)
    stopped = False
    for config in configs:
        stopped = process.stop(config, timeout=timeout) or stopped
    return stopped


def status(base: BrokerConfig) -> list[BrokerStatus]:
    """Each node's status, in node order."""
    return [process.status(config) for config in node_configs(base, recorded_nodes(base))]
