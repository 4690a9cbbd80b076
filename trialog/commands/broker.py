"""``trialog broker start|stop|status``: the command line of the local Kafka broker
(:mod:`trialog.broker`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trialog.broker import cluster
from trialog.broker.config import DEFAULT_HEAP, DEFAULT_KAFKA_VERSION, DEFAULT_PORT, HOST, BrokerConfig
from trialog.broker.process import start

_STATUS_STOPPED = 3


def add(sub) -> None:
    """Register ``broker start|stop|status`` on the CLI's subparsers."""
    broker = sub.add_parser("broker", help="run a local Apache Kafka broker for development and CI")
    commands = broker.add_subparsers(dest="broker_command", required=True, metavar="{start,stop,status}")

    start_parser = commands.add_parser(
        "start", help="start the broker (fetching Kafka the first time) and print its bootstrap address"
    )
    _add_location_flags(start_parser)
    start_parser.add_argument(
        "--port", type=int, help=f"broker port on {HOST} (env TRIALOG_BROKER_PORT, default {DEFAULT_PORT})"
    )
    start_parser.add_argument(
        "--controller-port", type=int, help="KRaft controller port (env TRIALOG_BROKER_CONTROLLER_PORT, default port+1)"
    )
    start_parser.add_argument(
        "--kafka-version", help=f"Apache Kafka version (env TRIALOG_KAFKA_VERSION, default {DEFAULT_KAFKA_VERSION})"
    )
    start_parser.add_argument(
        "--heap", help=f"JVM maximum heap, as for -Xmx (env TRIALOG_BROKER_HEAP, default {DEFAULT_HEAP})"
    )
    start_parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the broker to answer (default 60)"
    )
    start_parser.add_argument(
        "--fresh", action="store_true", help="stop the broker and delete its data before starting"
    )
    start_parser.add_argument(
        "--secure",
        action="store_true",
        help="SASL_SSL (SCRAM-SHA-512) with certificates made on the fly, StandardAuthorizer and one principal "
        "per role with least-privilege ACLs; writes each role's client settings to DATA_DIR/secure/ "
        "(docs/security.md). Give it a data dir of its own",
    )
    start_parser.add_argument(
        "--topic-prefix", help="the deployment's topic prefix the roles' ACLs cover (--secure; default trialog.)"
    )
    start_parser.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="a cluster of N KRaft nodes on this machine (node K on port + 2(K-1), its data in DATA_DIR/node-K); "
        "prints their addresses comma-separated. Started again, it starts the nodes that are not running (default 1)",
    )
    start_parser.set_defaults(func=_cli_start)

    stop_parser = commands.add_parser("stop", help="stop the broker (its data stays)")
    _add_location_flags(stop_parser)
    stop_parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds to wait for a clean shutdown before killing it (default 30)",
    )
    stop_parser.set_defaults(func=_cli_stop)

    status_parser = commands.add_parser("status", help="say whether the broker runs; exit 0 if it does, 3 if not")
    _add_location_flags(status_parser)
    status_parser.add_argument(
        "--json", action="store_true", help="one JSON object: running, pid, bootstrap, data_dir, kafka_version"
    )
    status_parser.set_defaults(func=_cli_status)


def _add_location_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", type=Path, help="broker data dir (env TRIALOG_BROKER_DIR, default ~/.local/share/trialog/broker)"
    )


def _config_from_args(args: argparse.Namespace) -> BrokerConfig:
    names = ("data_dir", "port", "controller_port", "kafka_version", "heap", "secure", "topic_prefix")
    return BrokerConfig.from_env(**{name: getattr(args, name, None) for name in names})


def _cli_start(args: argparse.Namespace) -> int:
    config = _config_from_args(args)
    if args.nodes > 1 or cluster.recorded_nodes(config) > 1:
        print(cluster.start(config, args.nodes, fresh=args.fresh, timeout=args.timeout), flush=True)
    else:
        print(start(config, fresh=args.fresh, timeout=args.timeout), flush=True)
    return 0


def _cli_stop(args: argparse.Namespace) -> int:
    config = _config_from_args(args)
    stopped = cluster.stop(config, timeout=args.timeout)
    print("broker stopped" if stopped else f"broker is not running (data dir {config.data_dir})", file=sys.stderr)
    return 0


def _cli_status(args: argparse.Namespace) -> int:
    found = cluster.status(_config_from_args(args))
    if args.json:
        from trialog.commands.parts import fields_of, json_line

        for node in found:
            print(json_line(fields_of(node)))
    else:
        for node in found:
            print(node.describe())
    return 0 if all(node.running for node in found) else _STATUS_STOPPED
