"""Client settings for secured clusters, and the secured local broker's configuration (no broker)."""

from __future__ import annotations

import json
import ssl
import warnings

import pytest
from cryptography import x509

from trialog.broker import secure
from trialog.broker.config import BrokerConfig
from trialog.broker.storage import render_server_properties
from trialog.errors import SettingsError
from trialog.settings import Settings


def test_kafka_property_names_and_a_password_file(tmp_path):
    (tmp_path / "pw").write_text("s3cret\n")
    (tmp_path / "ca.pem").write_text("")
    (tmp_path / "client.yaml").write_text(
        f"bootstrap.servers: kafka.example:9093\nsecurity.protocol: sasl_ssl\nsasl.mechanism: SCRAM-SHA-512\n"
        f"sasl.username: actors\nsasl_password_file: {tmp_path / 'pw'}\nssl.ca.location: {tmp_path / 'ca.pem'}\n"
    )
    s = Settings.load({"settings": str(tmp_path / "client.yaml")}, environ={})
    assert (s.bootstrap_servers, s.security_protocol, s.sasl_mechanism, s.sasl_username, s.sasl_password) == (
        "kafka.example:9093", "SASL_SSL", "SCRAM-SHA-512", "actors", "s3cret")  # fmt: skip
    assert s.ssl_cafile == str(tmp_path / "ca.pem")
    assert {name: shown for name, shown, _ in s.describe()}["sasl_password"] == "****"  # `trialog settings` masks it
    # The Java client's .properties form, and Kafka names next to Trialog's own.
    (tmp_path / "client.properties").write_text(
        "# a comment\nbootstrap.servers=b:1\nsecurity.protocol=SASL_PLAINTEXT\n"
        "sasl.username=u\nsasl.password=p\ntopic_prefix=x.\n"
    )
    s = Settings.load({"settings": str(tmp_path / "client.properties")}, environ={})
    assert (s.bootstrap_servers, s.sasl_password, s.topic_prefix) == ("b:1", "p", "x.")
    (tmp_path / "bad.yaml").write_text("sasl.kerberos.service.name: kafka\n")
    with pytest.raises(SettingsError, match="or Kafka's bootstrap.servers"):
        Settings.load({"settings": str(tmp_path / "bad.yaml")}, environ={})
    with pytest.raises(SettingsError, match="cannot read sasl_password_file"):
        Settings.load({"sasl_password_file": str(tmp_path / "missing")}, environ={})
    # A password on the command line still works, with a warning: `ps` shows it.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Settings.load({"sasl_password": "p"}, environ={})
    assert any("process" in str(w.message) for w in caught)
    # The environment variable does not warn.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Settings.load({}, environ={"TRIALOG_SASL_PASSWORD": "p"}).sasl_password == "p"


def test_secure_broker_files_listeners_and_acls(tmp_path):
    config = BrokerConfig(data_dir=tmp_path, port=9392, controller_port=9393, secure=True, topic_prefix="dep.")
    passwords = secure.prepare(config, "dep.")
    folder = secure.secure_dir(config)
    assert set(passwords) == {"admin", *secure.ROLE_ACLS}
    for path in folder.iterdir():
        assert path.stat().st_mode & 0o077 == 0, path  # owner only
    cert = x509.load_pem_x509_certificates((folder / "broker.pem").read_bytes())[0]
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    ssl.create_default_context(cafile=str(folder / "ca.pem"))  # a CA Python's TLS accepts
    properties = render_server_properties(config, passwords)
    assert "PLAINTEXT://" not in properties and "listeners=SASL_SSL://127.0.0.1:9392," in properties
    assert "StandardAuthorizer" in properties and "allow.everyone.if.no.acl.found=false" in properties
    # Each role's settings: its own user, the password in a file (not in the settings).
    actors = Settings.load({"settings": str(folder / "actors.yaml")}, environ={})
    assert (actors.sasl_username, actors.security_protocol, actors.topic_prefix) == ("actors", "SASL_SSL", "dep.")
    assert passwords["actors"] not in (folder / "actors.yaml").read_text()
    # The ACL commands grant exactly the table, nothing to the actors on control or trials.
    granted: set[tuple[str, str, str, str]] = set()
    for args in secure.acl_commands("dep."):
        ops = [args[i + 1] for i, a in enumerate(args) if a == "--operation"]
        principals = [args[i + 1][5:] for i, a in enumerate(args) if a == "--allow-principal"]
        kind = "topic" if "--topic" in args else "group" if "--group" in args else "transactional-id"
        names = [args[i + 1] for i, a in enumerate(args) if a == f"--{kind}"]
        prefixed = "prefixed" in args
        granted |= {(p, op, f"{kind}:{n}{'*' if prefixed else ''}") for p in principals for op in ops for n in names}
    wanted = {
        (r, op, f"topic:dep.{t}")
        for r, (reads, writes) in secure.ROLE_ACLS.items()
        for op, ts in (("Read", reads), ("Write", writes))
        for t in ts
    }
    wanted |= {(r, "Read", "group:dep.*") for r in secure.ROLE_ACLS}
    wanted |= {(r, "DescribeConfigs", f"topic:dep.{t}") for r, ts in secure.DESCRIBES_CONFIGS.items() for t in ts}
    # The analytics jobs: their own topics, Quix's internal ones (outside the prefix), their transactions.
    wanted |= {
        ("analytics", op, f"topic:{name}*")
        for name in ("dep.analytics.", "changelog__dep.analytics--", "repartition__dep.analytics--")
        for op in ("Create", "Describe", "DescribeConfigs", "Read", "Write")
    }
    wanted |= {("analytics", op, "transactional-id:dep.analytics-*") for op in ("Describe", "Write")}
    assert granted == wanted
    granted = {(p, o, t.removeprefix("topic:")) for p, o, t in granted}
    assert not {
        (p, o, t) for p, o, t in granted if p == "actors" and t in ("dep.control", "dep.trials") and o == "Write"
    }


def test_a_role_added_since_the_data_dir_was_made_gets_its_user_and_acls_on_the_next_start(tmp_path, monkeypatch):
    """A data dir made before the analytics role: its principals keep their passwords (the broker
    has their users), the new one gets its own, its SCRAM user is created, and the ACLs are
    granted again — once."""
    config = BrokerConfig(data_dir=tmp_path, port=9392, controller_port=9393, secure=True, topic_prefix="dep.")
    before = secure.credentials(config)
    del before["analytics"]
    (tmp_path / "secure" / "credentials.json").write_text(json.dumps(before))
    (tmp_path / "secure" / "acls-dep.done").write_text("granted\n")  # what an earlier version wrote
    after = secure.prepare(config, "dep.")
    assert {k: after[k] for k in before} == before and after["analytics"] not in before.values()
    assert (tmp_path / "secure" / "analytics.yaml").is_file()
    assert secure.credentials(config) == after

    ran: list[list[str]] = []
    known = "".join(
        f"SCRAM credential configs for user-principal '{p}' are SCRAM-SHA-512=iterations=4096\n" for p in before
    )
    monkeypatch.setattr(secure, "_run_tool", lambda command, doing: ran.append(command) or known)
    secure.apply_acls(config, ["java"], "dep.")
    created = [c[c.index("--entity-name") + 1] for c in ran if "--alter" in c]
    assert created == ["analytics"]
    assert sum("org.apache.kafka.tools.AclCommand" in c for c in ran) == len(secure.acl_commands("dep."))
    ran.clear()
    secure.apply_acls(config, ["java"], "dep.")
    assert ran == []  # the same table: nothing to do
