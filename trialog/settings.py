"""The one settings object every Trialog command and service reads.

Each setting is declared once below, with its type, default and help. It can be
given, from weakest to strongest, by

1. a YAML file (``--settings FILE`` or ``TRIALOG_SETTINGS``) with the field names as keys,
2. an environment variable ``TRIALOG_<NAME>`` (e.g. ``TRIALOG_BOOTSTRAP_SERVERS``),
3. a command-line flag ``--<name>`` (e.g. ``--bootstrap-servers``).

``trialog settings`` prints the resolved values (secrets masked) and where each
came from. The same object drives a laptop broker and a SASL/TLS cluster.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trialog.errors import SettingsError

ENV_PREFIX = "TRIALOG_"
DEFAULT_PARTITIONS = 12  # as the Helm chart

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _setting(default: Any, help: str, *, secret: bool = False, choices: tuple[str, ...] | None = None) -> Any:
    return field(default=default, metadata={"help": help, "secret": secret, "choices": choices})


@dataclass(frozen=True)
class Settings:
    bootstrap_servers: str = _setting("127.0.0.1:9092", "Kafka bootstrap servers, comma-separated host:port.")
    topic_prefix: str = _setting(
        "trialog.", "Prefix of every topic and consumer group, so deployments can share a cluster."
    )
    partitions: int = _setting(
        0,
        "Partitions of every topic (control and events always equal: I-2); bounds how many instances "
        "of one service share the work. 0: 12, as the Helm chart, except that a local run (`trialog "
        "train`, `trialog run --serve`, the demo, `trialog teaming --local`) creates its topics with "
        "one per instance of its largest service, since "
        "each partition an instance reads costs it per request. Choose it up front: partitions "
        "can be added but never removed, and adding them moves trials between partitions.",
    )
    replication_factor: int = _setting(
        0,
        "Replication factor of the topics Trialog creates; 0: as many copies as the cluster has brokers, "
        "up to 3 (one on a single broker, three on a cluster, as the Helm chart's default).",
    )
    events_retention_ms: int = _setting(-1, "Retention of the events topic (the datalog); -1 keeps everything.")
    client_id: str = _setting("trialog", "Kafka client id prefix, shown in broker logs and metrics.")
    health_host: str = _setting(
        "127.0.0.1",
        "Address the services' health and metrics servers (/livez, /readyz, /metrics) listen on; "
        "0.0.0.0 in a container, where probes and scrapers come from outside (the image sets it).",
    )
    security_protocol: str = _setting("PLAINTEXT", "How to talk to Kafka.", choices=SECURITY_PROTOCOLS)
    sasl_mechanism: str = _setting("PLAIN", "SASL mechanism when the protocol is SASL_*.", choices=SASL_MECHANISMS)
    sasl_username: str = _setting("", "SASL user name.")
    sasl_password: str = _setting(
        "",
        "SASL password: prefer TRIALOG_SASL_PASSWORD or sasl_password_file (a flag shows in the process list).",
        secret=True,
    )
    sasl_password_file: str = _setting("", "File holding the SASL password (e.g. a mounted Secret), read at start.")
    ssl_cafile: str = _setting("", "CA bundle (PEM) to verify the brokers, for SSL/SASL_SSL.")
    ssl_certfile: str = _setting("", "Client certificate (PEM) for mutual TLS.")
    ssl_keyfile: str = _setting("", "Client private key (PEM) for mutual TLS.")
    spec: str = _setting("", "Spec YAML file(s) a service serves (the orchestrator takes several, comma-separated).")
    model_store: str = _setting(
        "",
        "Folder (shared by learners and actor services) "
        "for model weights too large to travel inline on the models topic.",
    )
    model_versions_kept: int = _setting(
        100,
        "Versions of each model the models topic keeps (the newest; 0: all): "
        "every actor service and learner reads them all when it starts.",
    )
    gateway_url: str = _setting(
        "http://127.0.0.1:8000",
        "Where people reach the web gateway: join links start with it (the gateway writes them too).",
    )
    keyring: str = _setting(
        "",
        "Keyring (JSON file, or a directory of one file per key) that tags and verifies records; "
        "empty: TRIALOG_KEY_* variables, "
        "else the local development keyring for a broker on this machine (docs/security.md).",
    )

    # --- derived names -----------------------------------------------------------
    def partition_count(self, local_instances: int | None = None) -> int:
        """The partitions of the topics Trialog creates: as set, else one per instance of a local
        run's largest service (``local_instances``), else ``DEFAULT_PARTITIONS``."""
        return self.partitions or local_instances or DEFAULT_PARTITIONS

    def replicas(self, brokers: int) -> int:
        """The replication factor of the topics Trialog creates on a cluster of ``brokers``."""
        return self.replication_factor or min(3, max(1, brokers))

    def topic(self, role: str) -> str:
        """Full topic name of a role: control, events, trials, models, dead-letters."""
        return f"{self.topic_prefix}{role}"

    def group(self, name: str) -> str:
        """Full consumer-group name (prefixed like the topics, for prefix ACLs)."""
        return f"{self.topic_prefix}{name}"

    def kafka_client_options(self) -> dict[str, Any]:
        """Keyword arguments common to aiokafka producers, consumers and admin clients."""
        options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "security_protocol": self.security_protocol,
        }
        if self.security_protocol.startswith("SASL"):
            options.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=self.sasl_password,
            )
        if self.security_protocol in ("SSL", "SASL_SSL"):
            from aiokafka.helpers import create_ssl_context

            options["ssl_context"] = create_ssl_context(
                cafile=self.ssl_cafile or None,
                certfile=self.ssl_certfile or None,
                keyfile=self.ssl_keyfile or None,
            )
        return options

    # --- loading ---------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        flags: Mapping[str, Any] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        file: str | os.PathLike[str] | None = None,
    ) -> Settings:
        """Resolve settings from file < environment < flags, validating each value."""
        environ = os.environ if environ is None else environ
        flags = {k: v for k, v in (flags or {}).items() if v is not None}
        file = file or flags.pop("settings", None) or environ.get(ENV_PREFIX + "SETTINGS")
        values: dict[str, Any] = {}
        for name, raw in _read_file(file).items():
            values[name] = _coerce(name, raw, f"{file}: {name}")
        for f in dataclasses.fields(cls):
            var = ENV_PREFIX + f.name.upper()
            if var in environ:
                values[f.name] = _coerce(f.name, environ[var], f"environment variable {var}")
        for name, raw in flags.items():
            if name in _FIELDS:
                values[name] = _coerce(name, raw, f"--{name.replace('_', '-')}")
        if "sasl_password" in flags:
            import warnings

            warnings.warn(
                "--sasl-password shows the password to anyone who can list processes; "
                "use TRIALOG_SASL_PASSWORD or --sasl-password-file instead",
                stacklevel=2,
            )
        if values.get("sasl_password_file") and not values.get("sasl_password"):
            try:
                values["sasl_password"] = Path(values["sasl_password_file"]).read_text().strip()
            except OSError as exc:
                raise SettingsError(
                    f"cannot read sasl_password_file {values['sasl_password_file']}: {exc.strerror}"
                ) from exc
        settings = cls(**values)
        settings._validate()
        return settings

    def _validate(self) -> None:
        if not self.bootstrap_servers.strip():
            raise SettingsError("bootstrap_servers is empty: set TRIALOG_BOOTSTRAP_SERVERS or --bootstrap-servers")
        for server in self.bootstrap_servers.split(","):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit():
                raise SettingsError(f"bootstrap server {server!r} is not host:port")
        if self.partitions < 0 or self.replication_factor < 0:
            raise SettingsError(
                "partitions and replication_factor must be at least 0 (0: by deployment, by cluster size)"
            )
        if self.security_protocol.startswith("SASL") and not self.sasl_username:
            raise SettingsError(
                f"security_protocol {self.security_protocol} needs sasl_username (TRIALOG_SASL_USERNAME)"
            )
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise SettingsError(f"{name} {path!r} is not a file")

    def describe(self) -> list[tuple[str, str, str]]:
        """(name, value, help) rows, secrets masked — for ``trialog settings``."""
        rows = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            shown = "****" if f.metadata["secret"] and value else str(value)
            rows.append((f.name, shown, f.metadata["help"]))
        return rows


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


# Kafka's usual client property names (librdkafka's and the Java client's), accepted in
# settings files beside Trialog's own.
KAFKA_NAMES = {
    "bootstrap.servers": "bootstrap_servers",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "client.id": "client_id",
}


def _read_file(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """A YAML mapping of settings, or a Java-style ``.properties`` file (``name=value`` lines)."""
    if not path:
        return {}
    if str(path).endswith(".properties"):
        try:
            lines = Path(path).read_text().splitlines()
        except OSError as exc:
            raise SettingsError(f"cannot read settings file {path}: {exc.strerror}") from exc
        data = {}
        for line in lines:
            line = line.strip()
            if line and not line.startswith(("#", "!")):
                name, sep, value = line.partition("=")
                if not sep:
                    raise SettingsError(f"settings file {path}: {line!r} is not name=value")
                data[name.strip()] = value.strip()
        return _known(data, path)
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise SettingsError(f"cannot read settings file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise SettingsError(f"settings file {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise SettingsError(f"settings file {path} must be a mapping of setting names to values")
    return _known(data, path)


def _known(data: dict[str, Any], path: str | os.PathLike[str]) -> dict[str, Any]:
    data = {KAFKA_NAMES.get(str(k), k): v for k, v in data.items()}
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise SettingsError(
            f"settings file {path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(_FIELDS)} "
            f"(or Kafka's {', '.join(KAFKA_NAMES)})"
        )
    return data


def _coerce(name: str, raw: Any, where: str) -> Any:
    f = _FIELDS[name]
    kind = type(f.default)
    if kind is int:
        try:
            value: Any = int(raw)
        except (TypeError, ValueError):
            raise SettingsError(f"{where}: expected a whole number, got {raw!r}") from None
    else:
        value = "" if raw is None else str(raw)
    choices = f.metadata["choices"]
    if choices:
        value = value.upper()
        if value not in choices:
            raise SettingsError(f"{where}: {raw!r} is not one of {', '.join(choices)}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per setting (plus ``--settings FILE``) to a parser."""
    group = parser.add_argument_group("connection settings (also TRIALOG_<NAME> variables or a --settings file)")
    group.add_argument("--settings", metavar="FILE", help="YAML file of settings (TRIALOG_SETTINGS)")
    for f in dataclasses.fields(Settings):
        group.add_argument(
            f"--{f.name.replace('_', '-')}",
            dest=f.name,
            default=None,
            metavar=f.name.upper(),
            help=f"{f.metadata['help']} [{ENV_PREFIX}{f.name.upper()}, default {f.default!r}]",
        )


def from_args(args: argparse.Namespace) -> Settings:
    return Settings.load(vars(args))
