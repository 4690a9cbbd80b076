"""The local broker with its locks on: ``trialog broker start --secure``.

One listener, SASL_SSL with SCRAM-SHA-512, for clients and for the broker itself; the
KRaft controller listener SASL_SSL with PLAIN (SCRAM credentials live in the metadata
log, which the controller listener must serve before it has read it). TLS certificates
are made on the fly with ``cryptography`` (a CA and a certificate for 127.0.0.1).
Kafka's ``StandardAuthorizer`` with one principal per role and the least-privilege ACLs
of :data:`ROLE_ACLS` on the deployment's topic prefix, set up with Kafka's own
``AclCommand``; the SCRAM users are created when the storage is formatted.

Files, in ``<data dir>/secure/`` (readable by the owner only):

- ``ca.pem`` — the CA clients verify the broker with; ``broker.pem`` its key and certificate;
- ``<role>.yaml`` — client settings for each role, written with Kafka's own property names
  (``bootstrap.servers``, ``security.protocol``, ``sasl.mechanism``, ``ssl.ca.location``...),
  the password in ``<role>.password`` beside it (never in a process's arguments):
  ``trialog serve actors --settings <data dir>/secure/actors.yaml``;
- ``admin.properties`` — the same for Kafka's Java tools.

:data:`ROLE_ACLS` is the one table of who may read and write which topic (with the
analytics role's own topic patterns and transactional ids below it); the Helm chart's
Strimzi users are checked against it (``tests/deploy``).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import secrets
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from trialog.errors import BrokerError
from trialog.protocol.topics import CONTROL, DEAD_LETTERS, EVENTS, MODELS, TRANSACTIONAL_PREFIX, TRIALS
from trialog.telemetry.logs import get_logger

if TYPE_CHECKING:
    from trialog.broker.config import BrokerConfig

log = get_logger(__name__)

ADMIN = "admin"
# The analytics jobs' results the gateway's dashboard follows (services/gateway/dashboard.py).
DASHBOARD_RESULTS = tuple(f"{TRANSACTIONAL_PREFIX}{job}" for job in ("trials", "returns-by-pairing", "environments"))
# role -> (topics it reads, topics it writes), by name under the prefix; every role also uses
# consumer groups under the prefix. The operator's admin principal is a super user (topics,
# ACLs); no service needs it.
ROLE_ACLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "orchestrator": ((CONTROL, EVENTS), (EVENTS, TRIALS, DEAD_LETTERS)),
    "environment": ((EVENTS,), (EVENTS, DEAD_LETTERS)),
    "actors": ((EVENTS, TRIALS, MODELS), (EVENTS, DEAD_LETTERS)),
    "logger": ((EVENTS, TRIALS), (DEAD_LETTERS,)),
    # The dashboard also follows the analytics results and the dead letters.
    "gateway": ((EVENTS, TRIALS, *DASHBOARD_RESULTS, DEAD_LETTERS), (CONTROL, EVENTS, DEAD_LETTERS)),
    "learner": ((EVENTS, TRIALS, MODELS), (MODELS, DEAD_LETTERS)),
    "controller": ((EVENTS, TRIALS, DEAD_LETTERS), (CONTROL, EVENTS)),
    # Writes only topics of its own, below.
    "analytics": ((EVENTS,), ()),
}
# The analytics jobs (services/analytics, a Quix Streams Application with consumer group
# <prefix>analytics) make and own topics named by Quix: the results <prefix>analytics.<job>,
# and the internal changelog__<group>--… (state) and repartition__<group>--… (group_by) —
# which begin with Quix's word, not with the prefix, so the topic prefix does not cover
# them. Patterns ({prefix}: the deployment's topic prefix) the role may create, describe
# (configs included: Quix checks every topic's partitions and configs) and read and write.
OWNED_TOPIC_PATTERNS: dict[str, tuple[str, ...]] = {
    "analytics": (
        "{prefix}" + TRANSACTIONAL_PREFIX,
        "changelog__{prefix}analytics--",
        "repartition__{prefix}analytics--",
    ),
}
OWNED_TOPIC_OPERATIONS = ("Create", "Describe", "DescribeConfigs", "Read", "Write")
# Topics a role reads whose configs it also describes (Quix inspects its input topic).
DESCRIBES_CONFIGS: dict[str, tuple[str, ...]] = {"analytics": (EVENTS,)}
# Transactional ids, by prefix: exactly-once commits state, results and offsets in one
# transaction, one transactional id per instance (services/analytics/app.py).
TRANSACTIONAL_ID_PATTERNS: dict[str, str] = {"analytics": "{prefix}analytics-"}
PRINCIPALS = (ADMIN, *ROLE_ACLS)
MECHANISM = "SCRAM-SHA-512"


def secure_dir(config: BrokerConfig) -> Path:
    return config.data_dir / "secure"


def settings_file(config: BrokerConfig, role: str) -> Path:
    """The client settings of one role (``--settings`` of any command or service)."""
    return secure_dir(config) / f"{role}.yaml"


def _private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


# --- certificates ----------------------------------------------------------------------------------


def _make_certificates(folder: Path) -> None:
    """A CA and a server certificate for 127.0.0.1/localhost signed by it (made once per data dir)."""
    try:
        from cryptography import x509
    except ImportError:
        raise BrokerError(
            "`trialog broker start --secure` makes its certificates with `cryptography`: pip install 'trialog[secure]'"
        ) from None
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Trialog local broker CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH, x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    _private(folder / "ca.pem", ca.public_bytes(pem))
    # Kafka's PEM key store: an unencrypted PKCS#8 key followed by the certificate chain.
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    _private(folder / "broker.pem", key_pem + cert.public_bytes(pem) + ca.public_bytes(pem))


# --- credentials and client settings -----------------------------------------------------------------


def credentials(config: BrokerConfig) -> dict[str, str]:
    """The password of each principal, made once per data dir."""
    folder = secure_dir(config)
    path = folder / "credentials.json"
    found = orjson.loads(path.read_bytes()) if path.is_file() else {}
    if set(PRINCIPALS) <= set(found):
        return found
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    # A role added since the data dir was made gets its password now (its user: apply_acls).
    found |= {p: secrets.token_urlsafe(24) for p in PRINCIPALS if p not in found}
    _private(path, orjson.dumps(found, option=orjson.OPT_INDENT_2))
    return found


def _write_client_files(config: BrokerConfig, topic_prefix: str, passwords: dict[str, str]) -> None:
    folder = secure_dir(config)
    ca = folder / "ca.pem"
    for principal, password in passwords.items():
        secret = folder / f"{principal}.password"
        _private(secret, password.encode())
        _private(
            folder / f"{principal}.yaml",
            (
                "# Client settings of the "
                f"{principal!r} principal (Kafka property names; the password stays in its file)\n"
                f"bootstrap.servers: {config.bootstrap}\n"
                "security.protocol: SASL_SSL\n"
                f"sasl.mechanism: {MECHANISM}\n"
                f"sasl.username: {principal}\n"
                f"sasl_password_file: {secret}\n"
                f"ssl.ca.location: {ca}\n"
                f"topic_prefix: {topic_prefix}\n"
            ).encode(),
        )
    _private(folder / "admin.properties", _java_client_properties(ca, passwords[ADMIN]).encode())


def _java_client_properties(ca: Path, admin_password: str) -> str:
    return (
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={MECHANISM}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ADMIN}" password="{admin_password}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={ca}\n"
    )


# --- the broker's side -------------------------------------------------------------------------------------


def server_properties(config: BrokerConfig, passwords: dict[str, str]) -> str:
    """What replaces the plaintext listeners of :func:`trialog.broker.storage.render_server_properties`."""
    folder = secure_dir(config)
    admin = passwords[ADMIN]
    host = config.bootstrap.rsplit(":", 1)[0]
    scram_jaas = (
        f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{ADMIN}" password="{admin}";'
    )
    plain_jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{ADMIN}" password="{admin}" user_{ADMIN}="{admin}";'
    )
    return f"""\
listeners=SASL_SSL://{config.bootstrap},CONTROLLER://{host}:{config.controller_port}
advertised.listeners=SASL_SSL://{config.bootstrap}
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL
inter.broker.listener.name=SASL_SSL
sasl.enabled.mechanisms={MECHANISM}
sasl.mechanism.inter.broker.protocol={MECHANISM}
listener.name.sasl_ssl.sasl.enabled.mechanisms={MECHANISM}
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={scram_jaas}
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config={plain_jaas}
ssl.keystore.type=PEM
ssl.keystore.location={folder / "broker.pem"}
ssl.truststore.type=PEM
ssl.truststore.location={folder / "ca.pem"}
ssl.endpoint.identification.algorithm=https
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:{ADMIN}
allow.everyone.if.no.acl.found=false
"""


def prepare(config: BrokerConfig, topic_prefix: str) -> dict[str, str]:
    """Certificates, passwords and client settings (made once; settings rewritten each start)."""
    passwords = credentials(config)
    folder = secure_dir(config)
    if not (folder / "broker.pem").is_file():
        _make_certificates(folder)
    _write_client_files(config, topic_prefix, passwords)
    return passwords


def format_arguments(passwords: dict[str, str]) -> list[str]:
    """``StorageTool format`` arguments that create the SCRAM users with the storage."""
    out = []
    for principal, password in passwords.items():
        out += ["--add-scram", f"{MECHANISM}=[name={principal},password={password}]"]
    return out


def admin_settings(config: BrokerConfig):
    from trialog.settings import Settings

    return Settings.load({"settings": str(settings_file(config, ADMIN))}, environ={})


# --- ACLs --------------------------------------------------------------------------------------------------


def acl_commands(topic_prefix: str) -> list[list[str]]:
    """``AclCommand`` arguments for :data:`ROLE_ACLS` (and the patterns after it) on
    ``topic_prefix``: one command per (operation, principals) with the topics they share
    (fewer JVM starts)."""
    grants: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    topics = dict.fromkeys(t for reads, writes in ROLE_ACLS.values() for t in (*reads, *writes))
    for operation, index in (("Read", 0), ("Write", 1)):
        for topic in topics:
            roles = tuple(r for r, acls in ROLE_ACLS.items() if topic in acls[index])
            if roles:
                grants.setdefault((operation, roles), []).append(topic_prefix + topic)
    for role, described in DESCRIBES_CONFIGS.items():
        grants.setdefault(("DescribeConfigs", (role,)), []).extend(topic_prefix + t for t in described)
    commands = []
    for (operation, roles), names in grants.items():
        args = ["--add", "--force", "--operation", operation]
        for role in roles:
            args += ["--allow-principal", f"User:{role}"]
        for topic in names:
            args += ["--topic", topic]
        commands.append(args)
    for role, patterns in OWNED_TOPIC_PATTERNS.items():
        args = ["--add", "--force", "--allow-principal", f"User:{role}", "--resource-pattern-type", "prefixed"]
        for operation in OWNED_TOPIC_OPERATIONS:
            args += ["--operation", operation]
        for pattern in patterns:
            args += ["--topic", pattern.format(prefix=topic_prefix)]
        commands.append(args)
    for role, pattern in TRANSACTIONAL_ID_PATTERNS.items():
        commands.append(
            ["--add", "--force", "--allow-principal", f"User:{role}", "--operation", "Describe", "--operation",
             "Write", "--transactional-id", pattern.format(prefix=topic_prefix), "--resource-pattern-type", "prefixed"]
        )  # fmt: skip
    # Consumer groups: every group a deployment uses is named with its prefix.
    group = ["--add", "--force", "--operation", "Read", "--group", topic_prefix, "--resource-pattern-type", "prefixed"]
    for role in ROLE_ACLS:
        group += ["--allow-principal", f"User:{role}"]
    commands.append(group)
    return commands


def apply_acls(config: BrokerConfig, java_command: list[str], topic_prefix: str) -> None:
    """Grant the roles their ACLs on ``topic_prefix`` (once per prefix, data dir and version
    of the table: a role added since, such as ``analytics``, is granted on the next start,
    its SCRAM user created first)."""
    commands = acl_commands(topic_prefix)
    done = secure_dir(config) / f"acls-{topic_prefix}done"
    granted = orjson.dumps(commands).decode()
    if done.is_file() and done.read_text() == granted:
        return
    admin = ["--bootstrap-server", config.bootstrap, "--command-config", str(secure_dir(config) / "admin.properties")]
    _add_missing_users(config, [*java_command, "kafka.admin.ConfigCommand", *admin])
    for args in commands:
        _run_tool([*java_command, "org.apache.kafka.tools.AclCommand", *admin, *args], f"granting {' '.join(args)}")
    done.write_text(granted)
    log.info("acls granted", prefix=topic_prefix, roles=", ".join(ROLE_ACLS))


def _add_missing_users(config: BrokerConfig, config_command: list[str]) -> None:
    """SCRAM users are made when the storage is formatted: a principal added to the table
    since (a data dir formatted by an earlier version) is created here."""
    listed = _run_tool([*config_command, "--describe", "--entity-type", "users"], "listing the SCRAM users")
    known = set(re.findall(r"user-principal '([^']+)'", listed))
    for principal, password in credentials(config).items():
        if principal not in known:
            _run_tool(
                [*config_command, "--alter", "--entity-type", "users", "--entity-name", principal,
                 "--add-config", f"{MECHANISM}=[password={password}]"],
                f"creating the SCRAM user {principal}",
            )  # fmt: skip
            log.info("scram user created", principal=principal)


def _run_tool(command: list[str], doing: str) -> str:
    ran = subprocess.run(command, capture_output=True, text=True, timeout=180)
    if ran.returncode != 0:
        tool = next(part for part in command if part.startswith(("org.apache", "kafka.")))
        raise BrokerError(
            f"Kafka's {tool} failed (exit {ran.returncode}) {doing}:\n{(ran.stdout + ran.stderr)[-2000:]}"
        )
    return ran.stdout


def describe(config: BrokerConfig) -> str:
    return f"client settings per role in {secure_dir(config)} (e.g. --settings {settings_file(config, 'orchestrator')})"
