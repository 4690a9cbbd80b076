"""The Helm chart renders, lints and validates for every value set, and refuses bad values.

Each file in tests/deploy/values/ is one way to install the chart. For each:
`helm lint --strict`, a render as `helm install` does it (values.schema.json
included), and every object checked against the Kubernetes OpenAPI schemas of
the oldest Kubernetes the chart supports and the newest kubernetes-validate
knows (strict: unknown fields fail), custom resources (Strimzi, Prometheus Operator)
against tests/deploy/schemas/.
Then what the chart promises is asserted on the rendered objects, and bad
values are shown to fail with a message that names the problem.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from deploykit import (
    CHART_DIR,
    NAMESPACE,
    VALUES_DIR,
    container,
    env_of,
    load_values,
    need,
)

from trialog.broker.secure import ROLE_ACLS

VALUE_SETS = sorted(path.stem for path in VALUES_DIR.glob("*.yaml"))
# The value sets the issue asks for; the test below fails if one goes missing.
REQUIRED_VALUE_SETS = {"minimal", "sasl-tls", "strimzi", "several-hosts", "hpa", "metrics", "gateway", "analytics"}
# Chart.yaml's kubeVersion floor, and the newest schemas kubernetes-validate ships.
OLDEST_KUBERNETES = "1.25.0"
SCHEMAS_DIR = Path(__file__).parent / "schemas"
CUSTOM_RESOURCE_SCHEMAS = {
    "KafkaTopic": SCHEMAS_DIR / "kafkatopic-kafka.strimzi.io-v1beta2.json",
    "KafkaUser": SCHEMAS_DIR / "kafkauser-kafka.strimzi.io-v1beta2.json",
    "ServiceMonitor": SCHEMAS_DIR / "servicemonitor-monitoring.coreos.com-v1.json",
}


def test_the_value_sets_the_ci_promises_are_there() -> None:
    assert REQUIRED_VALUE_SETS <= set(VALUE_SETS), f"missing value sets: {REQUIRED_VALUE_SETS - set(VALUE_SETS)}"


# --- lint and schema validation, per value set --------------------------------------------


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_lint_strict_passes(helm: ModuleType, value_set: str) -> None:
    report = helm.lint(CHART_DIR, load_values(value_set), strict=True, namespace=NAMESPACE)
    # Severity 1 is informational ("icon is recommended"); `helm lint --strict` fails on 2 and up.
    problems = [message for message in report["messages"] if message["severity"] >= 2]
    assert not problems and not report["errors"], json.dumps(report, indent=2)


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_object_matches_its_schema(render: Callable, value_set: str) -> None:
    kubernetes_validate = need("kubernetes_validate", "kubernetes-validate")
    jsonschema = need("jsonschema", "jsonschema")
    versions = [OLDEST_KUBERNETES, kubernetes_validate.latest_version()]
    rendered = render(load_values(value_set))
    assert rendered.objects, "the chart rendered nothing"
    failures = []
    for obj, source in zip(rendered.objects, rendered.sources):
        where = f"{source}: {obj['kind']} {obj['metadata']['name']}"
        if obj["kind"] in CUSTOM_RESOURCE_SCHEMAS:
            schema = json.loads(CUSTOM_RESOURCE_SCHEMAS[obj["kind"]].read_text())
            for error in jsonschema.Draft202012Validator(schema).iter_errors(obj):
                failures.append(f"{where}: {'.'.join(map(str, error.path))}: {error.message}")
            continue
        for version in versions:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                failures.append(f"{where} (Kubernetes {version}): {'.'.join(map(str, error.path))}: {error.message}")
            except kubernetes_validate.SchemaNotFoundError as error:
                failures.append(f"{where}: {error.message}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_objects_are_labelled_and_uniquely_named(render: Callable, value_set: str) -> None:
    rendered = render(load_values(value_set))
    seen = set()
    for obj in rendered.objects:
        labels = obj["metadata"].get("labels", {})
        for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by"):
            assert key in labels, f"{obj['kind']} {obj['metadata']['name']} has no label {key}"
        identity = (obj["kind"], obj["metadata"]["name"])
        assert identity not in seen, f"two objects are {identity}"
        seen.add(identity)


# --- what the chart promises, on the rendered objects -------------------------------------


def test_defaults_deploy_the_four_services_hardened_and_probed(render: Callable) -> None:
    rendered = render(load_values("minimal"))
    deployments = {d["metadata"]["name"]: d for d in rendered.of_kind("Deployment")}
    assert set(deployments) == {
        "rel-trialog-orchestrator",
        "rel-trialog-env-default",
        "rel-trialog-actors-default",
        "rel-trialog-logger",
    }
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        main = container(deployment)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        assert pod["serviceAccountName"] == "rel-trialog"
        assert main["securityContext"]["readOnlyRootFilesystem"] is True
        assert main["securityContext"]["allowPrivilegeEscalation"] is False
        assert main["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        mounts = {m["name"]: m["mountPath"] for m in main["volumeMounts"]}
        assert mounts["tmp"] == "/tmp"
        assert {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}} in pod["volumes"]
        assert main["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
        assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
        assert main["ports"] == [{"name": "health", "containerPort": 8080, "protocol": "TCP"}]
        assert main["args"][0] == "serve"
        assert main["args"][-2:] == ["--health-port", "8080"], name
        assert main["image"] == "trialog:0.1.0"
        env = env_of(deployment)
        assert env["TRIALOG_BOOTSTRAP_SERVERS"]["value"] == "kafka-bootstrap.kafka.svc:9092"
        assert env["TRIALOG_TOPIC_PREFIX"]["value"] == "trialog."
        assert env["TRIALOG_PARTITIONS"]["value"] == "12"
        assert env["TRIALOG_SPEC"]["value"] == "/etc/trialog/spec/trialog.yaml"
        assert env["TRIALOG_CLIENT_ID"]["value"] == "$(POD_NAME)"
        assert "TRIALOG_SASL_PASSWORD" not in env
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert len(annotations["checksum/spec"]) == 64
    assert container(deployments["rel-trialog-orchestrator"])["args"][:2] == ["serve", "orchestrator"]
    assert container(deployments["rel-trialog-env-default"])["args"][:4] == [
        "serve",
        "environment",
        "--spec",
        "/etc/trialog/spec/trialog.yaml",
    ]
    assert container(deployments["rel-trialog-logger"])["args"][:6] == [
        "serve",
        "logger",
        "--spec",
        "/etc/trialog/spec/trialog.yaml",
        "--archive-dir",
        "/var/lib/trialog/archive",
    ]
    logger_volumes = {v["name"]: v for v in deployments["rel-trialog-logger"]["spec"]["template"]["spec"]["volumes"]}
    assert logger_volumes["archive"] == {"name": "archive", "emptyDir": {}}

    spec = rendered.get("ConfigMap", "rel-trialog-spec")
    assert "max_ticks: 100" in spec["data"]["trialog.yaml"]
    # The schema file the spec names sits next to it: the whole ConfigMap is mounted.
    assert '"name": "rps.Observation"' in spec["data"]["rps_observation.avsc"]
    for deployment in deployments.values():
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        assert volumes["spec"]["configMap"] == {"name": "rel-trialog-spec"}
    assert {p["metadata"]["name"] for p in rendered.of_kind("PodDisruptionBudget")} == set(deployments)
    assert all(p["spec"]["maxUnavailable"] == 1 for p in rendered.of_kind("PodDisruptionBudget"))
    assert not rendered.of_kind("HorizontalPodAutoscaler")
    assert not rendered.of_kind("KafkaTopic") and not rendered.of_kind("KafkaUser")


def test_the_gateway_serves_people_behind_a_service_and_an_ingress(render: Callable) -> None:
    assert not render(load_values("minimal")).of_kind("Ingress")
    rendered = render(load_values("gateway"))
    gateway = rendered.get("Deployment", "rel-trialog-gateway")
    main = container(gateway)
    assert gateway["spec"]["replicas"] == 2
    assert main["args"][:2] == ["serve", "gateway"] and main["args"][-2:] == ["--health-port", "8080"]
    assert (
        main["args"][main["args"].index("--port") + 1] == "8000"
        and main["args"][main["args"].index("--host") + 1] == "0.0.0.0"
    )
    assert {"name": "http", "containerPort": 8000, "protocol": "TCP"} in main["ports"]
    assert (
        env_of(gateway)["TRIALOG_GATEWAY_URL"]["value"] == "https://play.example.org"
    )  # join links point at the Ingress
    service = rendered.get("Service", "rel-trialog-gateway")
    assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "gateway"
    ingress = rendered.get("Ingress", "rel-trialog-gateway")
    assert ingress["spec"]["rules"][0]["host"] == "play.example.org"
    assert ingress["spec"]["tls"] == [{"hosts": ["play.example.org"], "secretName": "play-example-org-tls"}]
    assert "rel-trialog-gateway" in {p["metadata"]["name"] for p in rendered.of_kind("PodDisruptionBudget")}


def test_metrics_are_scraped_by_a_service_monitor_and_drawn_by_the_dashboard(render: Callable) -> None:
    assert not render(load_values("minimal")).of_kind("ServiceMonitor")
    rendered = render(load_values("metrics"))
    service = rendered.get("Service", "rel-trialog-metrics")
    monitor = rendered.get("ServiceMonitor", "rel-trialog")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"] == [{"name": "health", "port": 8080, "targetPort": "health", "protocol": "TCP"}]
    # The Service reaches every service's pods, and the ServiceMonitor this Service only.
    for deployment in rendered.of_kind("Deployment"):
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items(), deployment["metadata"]["name"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    [endpoint] = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["interval"]) == ("health", "/metrics", "15s")

    dashboard_map = rendered.get("ConfigMap", "rel-trialog-dashboard")
    assert dashboard_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard_map["metadata"]["annotations"] == {"grafana_folder": "Trialog"}
    dashboard = json.loads(dashboard_map["data"]["trialog.json"])
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"trialog_[a-z_]+", target["expr"])
    }
    assert queried and queried <= exposed_metric_names(), queried - exposed_metric_names()


def exposed_metric_names() -> set[str]:
    """Every sample name the services can expose (a counter as NAME_total, a histogram as
    NAME_bucket/_count/_sum), whether or not it has samples yet."""
    from prometheus_client import REGISTRY

    import trialog.telemetry.metrics  # noqa: F401  (registers the definitions)

    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"], "gauge": [""]}
    return {family.name + suffix for family in REGISTRY.collect() for suffix in suffixes.get(family.type, [""])}


def test_topics_are_created_by_a_pre_install_hook_job(render: Callable) -> None:
    rendered = render(load_values("minimal"))
    job = rendered.get("Job", "rel-trialog-topics")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    assert container(job)["args"] == ["topics", "create"]
    assert env_of(job)["TRIALOG_BOOTSTRAP_SERVERS"]["value"] == "kafka-bootstrap.kafka.svc:9092"
    # events is the datalog: kept forever unless topics.events says otherwise.
    assert env_of(job)["TRIALOG_EVENTS_RETENTION_MS"]["value"] == "-1"
    # A pre-install hook runs before the chart's ServiceAccount exists.
    assert "serviceAccountName" not in job["spec"]["template"]["spec"]


def test_the_spec_checksum_follows_the_spec(render: Callable) -> None:
    def checksum(values: dict[str, Any]) -> str:
        deployment = render(values).get("Deployment", "rel-trialog-orchestrator")
        return deployment["spec"]["template"]["metadata"]["annotations"]["checksum/spec"]

    values = load_values("minimal")
    before = checksum(values)
    values["spec"]["content"] += "\n# changed\n"
    after_spec = checksum(values)
    values["spec"]["files"]["rps_observation.avsc"] += " "
    assert len({before, after_spec, checksum(values)}) == 3


def test_sasl_and_tls_come_from_existing_secrets(render: Callable) -> None:
    rendered = render(load_values("sasl-tls"))
    for workload in rendered.of_kind("Deployment") + rendered.of_kind("Job"):
        env = env_of(workload)
        assert env["TRIALOG_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
        assert env["TRIALOG_SASL_MECHANISM"]["value"] == "SCRAM-SHA-512"
        assert env["TRIALOG_SASL_USERNAME"]["valueFrom"]["secretKeyRef"] == {
            "name": "trialog-kafka-credentials",
            "key": "user",
        }
        assert env["TRIALOG_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": "trialog-kafka-credentials",
            "key": "pass",
        }
        assert env["TRIALOG_SSL_CAFILE"]["value"] == "/etc/trialog/kafka/ca/ca.pem"
        assert "TRIALOG_SSL_CERTFILE" not in env
        pod = workload["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["kafka-ca"]["secret"]["secretName"] == "kafka-ca"
        assert volumes["kafka-ca"]["secret"]["items"] == [{"key": "ca.pem", "path": "ca.pem"}]
        mounts = {m["name"]: m for m in container(workload)["volumeMounts"]}
        assert mounts["kafka-ca"] == {"name": "kafka-ca", "mountPath": "/etc/trialog/kafka/ca", "readOnly": True}
    spec = rendered.get("ConfigMap", "rel-trialog-spec")
    assert "actor_classes:" in spec["data"]["trialog.yaml"]


def test_mutual_tls_an_external_spec_and_a_persistent_archive(render: Callable) -> None:
    rendered = render(load_values("mtls"))
    assert not rendered.of_kind("ConfigMap") and not rendered.of_kind("Job") and not rendered.of_kind("ServiceAccount")
    for deployment in rendered.of_kind("Deployment"):
        env = env_of(deployment)
        assert env["TRIALOG_SSL_CERTFILE"]["value"] == "/etc/trialog/kafka/client/tls.crt"
        assert env["TRIALOG_SSL_KEYFILE"]["value"] == "/etc/trialog/kafka/client/tls.key"
        assert env["TRIALOG_SPEC"]["value"] == "/etc/trialog/spec/spec.yaml"
        assert "TRIALOG_SASL_USERNAME" not in env
        pod = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["spec"]["configMap"]["name"] == "trialog-spec"
        assert volumes["kafka-client"]["secret"]["secretName"] == "trialog-client-cert"
        assert pod["serviceAccountName"] == "trialog-runner"
        assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}]
        assert container(deployment)["image"] == (
            "registry.example.com/ml/trialog@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        )
    claim = rendered.get("PersistentVolumeClaim", "rel-trialog-archive")
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "100Gi"
    logger = rendered.get("Deployment", "rel-trialog-logger")
    assert logger["spec"]["strategy"] == {"type": "Recreate"}
    volumes = {v["name"]: v for v in logger["spec"]["template"]["spec"]["volumes"]}
    assert volumes["archive"]["persistentVolumeClaim"] == {"claimName": "rel-trialog-archive"}


def test_strimzi_mode_declares_topics_and_a_user_per_service(render: Callable) -> None:
    rendered = render(load_values("strimzi"))
    assert not rendered.of_kind("Job"), "the topic Job must be off in Strimzi mode"
    topics = {t["spec"]["topicName"]: t for t in rendered.of_kind("KafkaTopic")}
    assert set(topics) == {f"trialog.{name}" for name in ("control", "events", "trials", "models", "dead-letters")}
    for topic in topics.values():
        assert topic["metadata"]["labels"]["strimzi.io/cluster"] == "my-cluster"
        assert topic["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert topic["spec"]["replicas"] == 3
    # I-2: control and events have the same partition count.
    assert topics["trialog.control"]["spec"]["partitions"] == topics["trialog.events"]["spec"]["partitions"] == 6
    assert topics["trialog.trials"]["spec"]["config"]["cleanup.policy"] == "compact"
    assert topics["trialog.models"]["spec"]["config"]["cleanup.policy"] == "compact"
    assert topics["trialog.events"]["spec"]["config"] == {
        "cleanup.policy": "delete",
        "retention.ms": -1,
        "max.message.bytes": 1048576,
        "min.insync.replicas": 2,  # as `trialog topics create` sets it: min(2, replicas)
    }
    assert topics["trialog.dead-letters"]["spec"]["config"]["retention.ms"] == 2592000000

    deployments = {d["metadata"]["name"]: d for d in rendered.of_kind("Deployment")}
    users = {u["metadata"]["name"]: u for u in rendered.of_kind("KafkaUser")}
    assert (
        set(users)
        == set(deployments)
        == {
            "rel-trialog-orchestrator",
            "rel-trialog-env-overcooked",
            "rel-trialog-actors-bots",
            "rel-trialog-logger",
        }
    )
    for name, user in users.items():
        assert user["metadata"]["labels"]["strimzi.io/cluster"] == "my-cluster"
        assert user["spec"]["authentication"] == {"type": "scram-sha-512"}
        acls = user["spec"]["authorization"]["acls"]
        by_type = {acl["resource"]["type"]: acl for acl in acls}
        # Least privilege per role: the same table as the local secured broker's.
        role = container(deployments[name])["name"]
        reads, writes = ROLE_ACLS[role]
        granted = {
            (acl["resource"]["name"], op)
            for acl in acls
            if acl["resource"]["type"] == "topic"
            for op in acl["operations"]
        }
        assert all(acl["resource"]["patternType"] == "literal" for acl in acls if acl["resource"]["type"] == "topic")
        assert {(n, op) for n, op in granted if op != "Describe"} == {(f"trialog.{t}", "Read") for t in reads} | {
            (f"trialog.{t}", "Write") for t in writes
        }
        assert by_type["group"]["resource"] == {"type": "group", "name": "trialog.", "patternType": "prefix"}
        assert by_type["transactionalId"]["operations"] == ["Describe", "Write"]
        # The service's pods log in as that user, with the Secret the User Operator writes.
        env = env_of(deployments[name])
        assert env["TRIALOG_SASL_USERNAME"]["value"] == name
        assert env["TRIALOG_SASL_MECHANISM"]["value"] == "SCRAM-SHA-512"
        assert env["TRIALOG_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": name, "key": "password"}
        # The brokers' certificates are checked against Strimzi's cluster CA by default.
        volumes = {v["name"]: v for v in deployments[name]["spec"]["template"]["spec"]["volumes"]}
        assert volumes["kafka-ca"]["secret"]["secretName"] == "my-cluster-cluster-ca-cert"
    args = container(deployments["rel-trialog-actors-bots"])["args"]
    assert args[4:8] == ["--implementation", "random", "--implementation", "scripted"]
    assert "kubectl -n trialog get kafkatopics,kafkausers" in rendered.notes


def test_the_keyring_secret_gives_actor_hosts_their_own_keys_only(render: Callable) -> None:
    values = load_values("strimzi")
    values["trust"] = {"keyringSecret": "trialog-keyring"}
    rendered = render(values)
    for deployment in rendered.of_kind("Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        volume = next(v for v in pod["volumes"] if v["name"] == "keyring")
        assert volume["secret"]["secretName"] == "trialog-keyring"
        assert env_of(deployment)["TRIALOG_KEYRING"]["value"] == "/etc/trialog/keyring"
        if container(deployment)["name"] == "actors":
            assert [i["key"] for i in volume["secret"]["items"]] == ["actors.random", "actors.scripted"]
        else:
            assert "items" not in volume["secret"]  # core services: the whole keyring


def test_strimzi_tls_users_mount_their_own_certificates(render: Callable) -> None:
    rendered = render(load_values("strimzi-tls"))
    for user in rendered.of_kind("KafkaUser"):
        assert user["spec"]["authentication"] == {"type": "tls"}
        deployment = rendered.get("Deployment", user["metadata"]["name"])
        env = env_of(deployment)
        assert "TRIALOG_SASL_USERNAME" not in env
        assert env["TRIALOG_SSL_CERTFILE"]["value"] == "/etc/trialog/kafka/client/user.crt"
        assert env["TRIALOG_SSL_KEYFILE"]["value"] == "/etc/trialog/kafka/client/user.key"
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        assert volumes["kafka-client"]["secret"]["secretName"] == user["metadata"]["name"]
    events = next(t for t in rendered.of_kind("KafkaTopic") if t["spec"]["topicName"] == "trialog.events")
    assert events["spec"]["config"] == {
        "cleanup.policy": "delete",
        "retention.ms": 31536000000,
        "min.insync.replicas": 2,
        "message.timestamp.type": "LogAppendTime",
        "max.message.bytes": 1048576,
    }
    assert "helm.sh/resource-policy" not in events["metadata"].get("annotations", {})


def test_several_hosts_each_get_a_deployment_sized_on_its_own(render: Callable) -> None:
    rendered = render(load_values("several-hosts"))
    deployments = {d["metadata"]["name"]: d for d in rendered.of_kind("Deployment")}
    assert set(deployments) == {
        "rel-trialog-orchestrator",
        "rel-trialog-env-overcooked",
        "rel-trialog-env-gym",
        "rel-trialog-actors-learners",
        "rel-trialog-actors-bots",
        "rel-trialog-actors-humans",
        "rel-trialog-logger",
    }
    overcooked = deployments["rel-trialog-env-overcooked"]
    assert overcooked["spec"]["replicas"] == 6
    assert container(overcooked)["args"] == [
        "serve",
        "environment",
        "--spec",
        "/etc/trialog/spec/trialog.yaml",
        "--implementation",
        "overcooked-cramped-room",
        "--implementation",
        "overcooked-asymmetric",
        "--health-port",
        "8080",
    ]
    assert container(overcooked)["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    # An entry's 0 and false win over hostDefaults' 1 and true.
    assert deployments["rel-trialog-env-gym"]["spec"]["replicas"] == 0
    pdbs = {p["metadata"]["name"]: p for p in rendered.of_kind("PodDisruptionBudget")}
    assert "rel-trialog-env-gym" not in pdbs
    assert pdbs["rel-trialog-actors-bots"]["spec"] == {
        "minAvailable": "50%",
        "selector": {
            "matchLabels": {
                "app.kubernetes.io/name": "trialog",
                "app.kubernetes.io/instance": "rel",
                "app.kubernetes.io/component": "actors",
                "trialog/host": "bots",
            }
        },
    }
    learners = deployments["rel-trialog-actors-learners"]
    pod = learners["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"accelerator": "gpu"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert container(learners)["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert env_of(learners)["CUDA_VISIBLE_DEVICES"]["value"] == "0"
    # Keys an entry leaves out come from hostDefaults.
    humans = deployments["rel-trialog-actors-humans"]
    assert humans["spec"]["replicas"] == 1
    assert container(humans)["resources"]["requests"] == {"cpu": "250m", "memory": "512Mi"}
    assert container(humans)["args"][-4:] == ["--health-port", "8080", "--max-trials", "200"]
    # Selectors of two hosts of one kind never overlap.
    selectors = [tuple(sorted(d["spec"]["selector"]["matchLabels"].items())) for d in deployments.values()]
    assert len(set(selectors)) == len(selectors)


def test_a_learner_gets_a_deployment_and_shares_the_model_store_with_actor_hosts(render: Callable) -> None:
    values = load_values("minimal")
    values["learners"] = [{"name": "cartpole", "implementation": "dqn", "experiment": "dqn-cartpole"}]
    values["modelStore"] = {"existingClaim": "trialog-models", "mountPath": "/models"}
    deployments = {d["metadata"]["name"]: d for d in render(values).of_kind("Deployment")}
    learner = deployments["rel-trialog-learner-cartpole"]
    assert learner["spec"]["replicas"] == 1
    assert container(learner)["args"] == [
        "serve", "learner", "--spec", "/etc/trialog/spec/trialog.yaml", "--implementation", "dqn",
        "--experiment", "dqn-cartpole", "--health-port", "8080",
    ]  # fmt: skip
    for name in ("rel-trialog-learner-cartpole", "rel-trialog-actors-default"):
        d = deployments[name]
        assert env_of(d)["TRIALOG_MODEL_STORE"]["value"] == "/models"
        volumes = {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}
        assert volumes["models"]["persistentVolumeClaim"]["claimName"] == "trialog-models"
    assert "TRIALOG_MODEL_STORE" not in env_of(deployments["rel-trialog-orchestrator"])


def test_autoscaling_replaces_fixed_replicas(render: Callable) -> None:
    rendered = render(load_values("hpa"))
    hpas = {h["metadata"]["name"]: h for h in rendered.of_kind("HorizontalPodAutoscaler")}
    assert set(hpas) == {"rel-trialog-orchestrator", "rel-trialog-env-default", "rel-trialog-actors-default"}
    assert not rendered.of_kind("PersistentVolumeClaim")
    assert "rel-trialog-logger" not in {d["metadata"]["name"] for d in rendered.of_kind("Deployment")}
    for name, hpa in hpas.items():
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
        assert "replicas" not in rendered.get("Deployment", name)["spec"], "the HPA owns the replica count"
    env = hpas["rel-trialog-env-default"]
    assert (env["spec"]["minReplicas"], env["spec"]["maxReplicas"]) == (2, 16)
    assert env["spec"]["metrics"] == [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}},
    ]
    # Scaling down rebalances the group: by default slowly, one pod at a time.
    assert env["spec"]["behavior"]["scaleDown"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 120}]
    actors = hpas["rel-trialog-actors-default"]
    assert [m["resource"]["name"] for m in actors["spec"]["metrics"]] == ["cpu", "memory"]
    assert actors["spec"]["behavior"] == {"scaleDown": {"stabilizationWindowSeconds": 600}}
    # 40 actor replicas on 32 partitions: NOTES.txt says that 8 would stand idle.
    assert "rel-trialog-actors-default can run 40 replicas" in rendered.notes
    assert "rel-trialog-env-default can run" not in rendered.notes


def test_notes_tell_what_to_run_next(render: Callable) -> None:
    notes = render(load_values("minimal")).notes
    assert "kubectl -n trialog rollout status deployment -l app.kubernetes.io/instance=rel" in notes
    assert "exec -it deploy/rel-trialog-orchestrator" in notes
    assert "trialog run /etc/trialog/spec/trialog.yaml --trials 10 --concurrency 4" in notes
    assert "WARNING" not in notes


# --- bad values are refused, with a message that names the problem ------------------------


def _without_bootstrap(values: dict[str, Any]) -> None:
    del values["kafka"]["bootstrapServers"]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(values: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = values
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value

    return apply


def _both(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def apply(values: dict[str, Any]) -> None:
        for change in changes:
            change(values)

    return apply


SCHEMA_REFUSALS = [
    ("missing bootstrap servers", _without_bootstrap, "at '/kafka': missing property 'bootstrapServers'"),
    (
        "replicas as a word",
        _set("orchestrator.replicas", "two"),
        "at '/orchestrator/replicas': got string, want integer",
    ),
    ("unknown key", _set("orchestrator.replica", 2), "at '/orchestrator': additional properties 'replica' not allowed"),
    ("misplaced key", _set("replicas", 2), "additional properties 'replicas' not allowed"),
    ("bootstrap without a port", _set("kafka.bootstrapServers", "kafka"), "at '/kafka/bootstrapServers'"),
    ("unknown security protocol", _set("kafka.security.protocol", "SASL"), "at '/kafka/security/protocol'"),
    ("unknown SASL mechanism", _set("kafka.security.sasl.mechanism", "GSSAPI"), "at '/kafka/security/sasl/mechanism'"),
    ("zero partitions", _set("kafka.partitions", 0), "at '/kafka/partitions'"),
    ("host name with capitals", _set("actors", [{"name": "Bots"}]), "at '/actors/0/name'"),
    ("host without a name", _set("environments", [{"replicas": 2}]), "at '/environments/0': missing property 'name'"),
    (
        "host with an unknown key",
        _set("actors", [{"name": "a", "replica": 2}]),
        "additional properties 'replica' not allowed",
    ),
    ("log level", _set("logging.level", "verbose"), "at '/logging/level'"),
    (
        "two learners of one model",
        _set("learners", [{"name": "l", "implementation": "dqn", "replicas": 2}]),
        "at '/learners/0/replicas'",
    ),
    ("spec file outside its folder", _set("spec.files", {"../x.avsc": "{}"}), "invalid propertyName '../x.avsc'"),
    ("Strimzi authentication", _set("strimzi.users.authentication", "plain"), "at '/strimzi/users/authentication'"),
    (
        "PDB as a word",
        _set("orchestrator.podDisruptionBudget.maxUnavailable", "one"),
        "at '/orchestrator/podDisruptionBudget/maxUnavailable'",
    ),
]


@pytest.mark.parametrize(
    ("change", "expected"), [case[1:] for case in SCHEMA_REFUSALS], ids=[c[0] for c in SCHEMA_REFUSALS]
)
def test_values_schema_refuses_bad_values(helm: ModuleType, chart: Any, change: Callable, expected: str) -> None:
    values = load_values("minimal")
    change(values)
    with pytest.raises(helm.HelmValuesError) as checked:
        chart.validate_schema(values)
    assert expected in str(checked.value)
    # And an install refuses them the same way, before rendering anything.
    with pytest.raises(helm.HelmValuesError) as installed:
        chart.render(values, name="rel", namespace=NAMESPACE, is_install=True)
    assert expected in str(installed.value)


TEMPLATE_REFUSALS = [
    (
        "no spec",
        _set("spec.content", None),
        "set spec.content (--set-file spec.content=trialog.yaml) or spec.existingConfigMap",
    ),
    ("two specs", _set("spec.existingConfigMap", "mine"), "set only one of spec.content and spec.existingConfigMap"),
    (
        "spec files with an external ConfigMap",
        _both(_set("spec.content", None), _set("spec.existingConfigMap", "mine")),
        "put them in that ConfigMap",
    ),
    ("a spec file named like the spec", _set("spec.files", {"trialog.yaml": "x"}), 'a file named "trialog.yaml"'),
    ("SASL without a Secret", _set("kafka.security.protocol", "SASL_SSL"), "needs kafka.security.sasl.existingSecret"),
    ("client certificate without TLS", _set("kafka.security.tls.clientSecret", "cert"), "does not use TLS"),
    ("Strimzi without a cluster", _set("strimzi.enabled", True), "strimzi.enabled needs strimzi.clusterName"),
    (
        "Strimzi SCRAM over PLAINTEXT",
        _set("strimzi", {"enabled": True, "clusterName": "c"}),
        "scram-sha-512 needs kafka.security.protocol SASL_SSL or SASL_PLAINTEXT, not PLAINTEXT",
    ),
    (
        "two hosts named alike",
        _set("actors", [{"name": "bots"}, {"name": "bots"}]),
        'actors: the name "bots" is used twice',
    ),
    (
        "CPU autoscaling without a CPU request",
        _set("actors", [{"name": "a", "resources": {"requests": {"memory": "1Gi"}}, "autoscaling": {"enabled": True}}]),
        'actors "a": autoscaling on CPU utilization needs resources.requests.cpu',
    ),
    (
        "autoscaling bounds upside down",
        _set("orchestrator.autoscaling", {"enabled": True, "minReplicas": 5, "maxReplicas": 2}),
        "orchestrator: autoscaling.minReplicas (5) is above autoscaling.maxReplicas (2)",
    ),
    (
        "two loggers on one ReadWriteOnce volume",
        _set("logger", {"replicas": 2, "archive": {"persistence": {"enabled": True}}}),
        "logger: more than one replica on a ReadWriteOnce archive volume",
    ),
]


@pytest.mark.parametrize(
    ("change", "expected"), [case[1:] for case in TEMPLATE_REFUSALS], ids=[c[0] for c in TEMPLATE_REFUSALS]
)
def test_inconsistent_values_fail_the_render(helm: ModuleType, chart: Any, change: Callable, expected: str) -> None:
    values = load_values("minimal")
    change(values)
    chart.validate_schema(values)  # each value is fine alone; together they are not
    with pytest.raises(helm.HelmRenderError) as refused:
        chart.render(values, name="rel", namespace=NAMESPACE, is_install=True)
    assert expected in str(refused.value)


def test_lint_reports_bad_values_as_errors(helm: ModuleType) -> None:
    values = load_values("minimal")
    values["orchestrator"] = {"replicas": "two"}
    report = helm.lint(CHART_DIR, values, strict=True)
    assert any("got string, want integer" in error for error in report["errors"]), report
