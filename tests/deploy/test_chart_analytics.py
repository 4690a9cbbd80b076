"""The analytics jobs in the chart: a Deployment (off by default) with its state on an
emptyDir, and in Strimzi mode a KafkaUser whose ACLs are the local secured broker's
analytics role (trialog/broker/secure.py): its result topics and Quix Streams' internal
topics by prefix pattern — those begin outside the topic prefix — and its transactional ids."""

from __future__ import annotations

from collections.abc import Callable

from deploykit import container, env_of, load_values

from trialog.broker import secure

PREFIX = "lab."  # the analytics value set's topic prefix


def _granted(user: dict) -> set[tuple[str, str, str, str]]:
    """(resource type, name, pattern type, operation) of every ACL of a KafkaUser."""
    return {
        (acl["resource"]["type"], acl["resource"]["name"], acl["resource"]["patternType"], op)
        for acl in user["spec"]["authorization"]["acls"]
        for op in acl["operations"]
    }


def _wanted(role: str) -> set[tuple[str, str, str, str]]:
    """The same role's ACLs as the local secured broker grants them (trialog.broker.secure)."""
    reads, writes = secure.ROLE_ACLS[role]
    topics = {("topic", PREFIX + t, "literal", "Describe") for t in (*reads, *writes)}
    topics |= {("topic", PREFIX + t, "literal", "Read") for t in reads}
    topics |= {("topic", PREFIX + t, "literal", "Write") for t in writes}
    topics |= {("topic", PREFIX + t, "literal", "DescribeConfigs") for t in secure.DESCRIBES_CONFIGS.get(role, ())}
    topics |= {
        ("topic", pattern.format(prefix=PREFIX), "prefix", op)
        for pattern in secure.OWNED_TOPIC_PATTERNS.get(role, ())
        for op in secure.OWNED_TOPIC_OPERATIONS
    }
    if role in secure.TRANSACTIONAL_ID_PATTERNS:
        name = secure.TRANSACTIONAL_ID_PATTERNS[role].format(prefix=PREFIX)
        topics |= {("transactionalId", name, "prefix", op) for op in ("Describe", "Write")}
    return topics | {("group", PREFIX, "prefix", op) for op in ("Describe", "Read")}


def test_analytics_is_off_by_default_and_the_notes_say_how_to_feed_the_dashboard(render: Callable) -> None:
    assert "rel-trialog-analytics" not in {d["metadata"]["name"] for d in render(load_values("minimal")).objects}
    assert "set analytics.enabled=true" in render(load_values("gateway")).notes
    assert "analytics.enabled" not in render(load_values("analytics")).notes


def test_the_analytics_jobs_get_a_deployment_with_their_state_on_an_empty_dir(render: Callable) -> None:
    rendered = render(load_values("analytics"))
    deployment = rendered.get("Deployment", "rel-trialog-analytics")
    main = container(deployment)
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert main["name"] == "analytics"
    args = main["args"]
    assert args[:2] == ["serve", "analytics"] and args[-2:] == ["--health-port", "8080"]
    options = dict(zip(args[2:-2:2], args[3:-2:2]))
    assert options == {
        "--spec": "/etc/trialog/spec/trialog.yaml",
        "--state-dir": "/var/lib/trialog/analytics",
        "--window": "50",
        "--guarantee": "exactly-once",
    }
    # Its RocksDB state: on an emptyDir of its own, where --state-dir points (the root filesystem is read-only).
    mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
    assert mounts["state"] == options["--state-dir"]
    assert main["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "state", "emptyDir": {"sizeLimit": "2Gi"}} in pod["volumes"]
    assert env_of(deployment)["TRIALOG_SASL_USERNAME"]["value"] == "rel-trialog-analytics"
    assert rendered.get("PodDisruptionBudget", "rel-trialog-analytics")["spec"]["maxUnavailable"] == 1


def test_the_analytics_user_owns_its_topics_internal_topics_and_transactional_ids(render: Callable) -> None:
    rendered = render(load_values("analytics"))
    users = {u["metadata"]["name"]: u for u in rendered.of_kind("KafkaUser")}
    analytics = _granted(users["rel-trialog-analytics"])
    assert analytics == _wanted("analytics")
    # Quix Streams names its internal topics changelog__<group>--… and repartition__<group>--…,
    # the group being <prefix>analytics: outside the prefix, so granted by pattern.
    owned = {name for kind, name, pattern, _ in analytics if kind == "topic" and pattern == "prefix"}
    assert owned == {"lab.analytics.", "changelog__lab.analytics--", "repartition__lab.analytics--"}
    assert ("transactionalId", "lab.analytics-", "prefix", "Write") in analytics
    assert not {acl for acl in analytics if acl[0] == "cluster"}  # no IdempotentWrite or any cluster right
    # Every other user is the secured broker's table too; the gateway reads what its dashboard shows.
    for name, user in users.items():
        role = container(rendered.get("Deployment", name))["name"]
        assert _granted(user) == _wanted(role), name
    gateway = _granted(users["rel-trialog-gateway"])
    assert ("topic", "lab.analytics.returns-by-pairing", "literal", "Read") in gateway
    assert not {acl for acl in gateway if acl[1].startswith(("changelog__", "repartition__"))}
