{{/*
Shared definitions: names, labels, the list of workloads (one per service
Deployment), and the Kafka settings every pod gets.
*/}}

{{- define "trialog.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "trialog.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "trialog.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that identify the release; selectors use exactly these (plus a workload's own). */}}
{{- define "trialog.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trialog.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "trialog.labels" -}}
helm.sh/chart: {{ include "trialog.chart" . }}
{{ include "trialog.selectorLabels" . }}
app.kubernetes.io/version: {{ include "trialog.imageTag" . | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: trialog
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one workload: ctx = dict "root" $ "w" <workload>. */}}
{{- define "trialog.workloadSelectorLabels" -}}
{{ include "trialog.selectorLabels" .root }}
app.kubernetes.io/component: {{ .w.component }}
{{- if .w.host }}
trialog/host: {{ .w.host }}
{{- end }}
{{- end }}

{{- define "trialog.workloadLabels" -}}
{{ include "trialog.labels" .root }}
app.kubernetes.io/component: {{ .w.component }}
{{- if .w.host }}
trialog/host: {{ .w.host }}
{{- end }}
{{- end }}

{{/* The name of a workload's Deployment, PDB, HPA and (Strimzi mode) KafkaUser. */}}
{{- define "trialog.workloadName" -}}
{{- printf "%s-%s" (include "trialog.fullname" .root) .w.key | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "trialog.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trialog.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "trialog.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{- define "trialog.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "trialog.imageTag" .) }}
{{- end }}
{{- end }}

{{- define "trialog.bootstrapServers" -}}
{{- required "kafka.bootstrapServers is required: the host:port list of your Kafka cluster's bootstrap brokers (--set kafka.bootstrapServers=broker:9092)" .Values.kafka.bootstrapServers }}
{{- end }}

{{/* Where the spec is mounted, and the file inside. */}}
{{- define "trialog.specDir" -}}/etc/trialog/spec{{- end }}
{{- define "trialog.specPath" -}}{{ include "trialog.specDir" . }}/{{ .Values.spec.key }}{{- end }}

{{- define "trialog.specConfigMapName" -}}
{{- default (printf "%s-spec" (include "trialog.fullname" .)) .Values.spec.existingConfigMap }}
{{- end }}

{{/* The spec's text: spec.content as given, or a mapping turned back into YAML. */}}
{{- define "trialog.specContent" -}}
{{- if kindIs "string" .Values.spec.content }}
{{- .Values.spec.content }}
{{- else }}
{{- toYaml .Values.spec.content }}
{{- end }}
{{- end }}

{{/*
Every service Deployment as a YAML list; templates range over
`include "trialog.workloads" . | fromYamlArray`. Each item:
  key        suffix of the object names (orchestrator, env-<name>, actors-<name>, learner-<name>, logger)
  component  app.kubernetes.io/component
  host       the entry's name for environment/actor hosts, "" otherwise
  args       the container's arguments
  archive    true for the logger (mounts the archive volume)
  models     true for actor hosts and learners (mount the model store, when one is set)
  web        true for the gateway (serves people on gateway.port)
  state      true for the analytics jobs (their local state on an emptyDir)
  values     the service's values; host entries merged over hostDefaults
*/}}
{{- define "trialog.workloads" -}}
{{- $root := . }}
{{- $health := list "--health-port" (toString (int .Values.health.port)) }}
{{- $spec := list "--spec" (include "trialog.specPath" .) }}
{{- $items := list }}
{{- if .Values.orchestrator.enabled }}
{{- $args := concat (list "serve" "orchestrator") $health .Values.orchestrator.extraArgs }}
{{- $items = append $items (dict "key" "orchestrator" "component" "orchestrator" "host" "" "args" $args "archive" false "models" false "values" .Values.orchestrator) }}
{{- end }}
{{- range $kind := list "environments" "actors" }}
{{- range $entry := index $root.Values $kind }}
{{- $v := include "trialog.withHostDefaults" (dict "root" $root "entry" $entry) | fromYaml }}
{{- $service := ternary "environment" "actors" (eq $kind "environments") }}
{{- $args := concat (list "serve" $service) $spec }}
{{- range $v.implementations }}
{{- $args = concat $args (list "--implementation" .) }}
{{- end }}
{{- $args = concat $args $health $v.extraArgs }}
{{- $key := printf "%s-%s" (ternary "env" "actors" (eq $kind "environments")) $v.name }}
{{- $items = append $items (dict "key" $key "component" $service "host" $v.name "args" $args "archive" false "models" (eq $kind "actors") "values" $v) }}
{{- end }}
{{- end }}
{{- range $entry := .Values.learners }}
{{- $v := include "trialog.withHostDefaults" (dict "root" $root "entry" $entry) | fromYaml }}
{{- $args := concat (list "serve" "learner") $spec (list "--implementation" $v.implementation) }}
{{- if $v.experiment }}
{{- $args = concat $args (list "--experiment" $v.experiment) }}
{{- end }}
{{- $args = concat $args $health $v.extraArgs }}
{{- $items = append $items (dict "key" (printf "learner-%s" $v.name) "component" "learner" "host" $v.name "args" $args "archive" false "models" true "values" $v) }}
{{- end }}
{{- if .Values.gateway.enabled }}
{{- $args := concat (list "serve" "gateway") $spec (list "--host" "0.0.0.0" "--port" (toString (int .Values.gateway.port))) $health .Values.gateway.extraArgs }}
{{- $items = append $items (dict "key" "gateway" "component" "gateway" "host" "" "args" $args "archive" false "web" true "values" .Values.gateway) }}
{{- end }}
{{- if .Values.analytics.enabled }}
{{- $a := .Values.analytics }}
{{- $args := concat (list "serve" "analytics") $spec (list "--state-dir" $a.state.mountPath "--window" (toString (int $a.window)) "--guarantee" $a.guarantee) $health $a.extraArgs }}
{{- $items = append $items (dict "key" "analytics" "component" "analytics" "host" "" "args" $args "archive" false "models" false "state" true "values" $a) }}
{{- end }}
{{- if .Values.logger.enabled }}
{{- $args := concat (list "serve" "logger") $spec (list "--archive-dir" .Values.logger.archive.mountPath) $health .Values.logger.extraArgs }}
{{- $items = append $items (dict "key" "logger" "component" "logger" "host" "" "args" $args "archive" true "models" false "values" .Values.logger) }}
{{- end }}
{{- toYaml $items }}
{{- end }}

{{/*
An environments/actors entry over hostDefaults. Written out rather than with
sprig's merge functions, which treat false and 0 as "unset" and would turn an
entry's `enabled: false` or `replicas: 0` back into the default.
*/}}
{{- define "trialog.withHostDefaults" -}}
{{- $out := deepCopy .entry }}
{{- range $key, $default := .root.Values.hostDefaults }}
{{- if not (hasKey $out $key) }}
{{- $_ := set $out $key (deepCopy $default) }}
{{- else if has $key (list "podDisruptionBudget" "autoscaling") }}
{{- $merged := deepCopy (index $out $key) }}
{{- range $k, $v := $default }}
{{- if not (hasKey $merged $k) }}
{{- $_ := set $merged $k $v }}
{{- end }}
{{- end }}
{{- $_ := set $out $key $merged }}
{{- end }}
{{- end }}
{{- if not (hasKey $out "implementations") }}
{{- $_ := set $out "implementations" list }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* True (non-empty) when the Strimzi User Operator provides each service's credentials. */}}
{{- define "trialog.strimziUsers" -}}
{{- if and .Values.strimzi.enabled .Values.strimzi.users.enabled }}true{{ end }}
{{- end }}

{{- define "trialog.usesSasl" -}}
{{- if hasPrefix "SASL_" .Values.kafka.security.protocol }}true{{ end }}
{{- end }}

{{- define "trialog.usesTls" -}}
{{- if has .Values.kafka.security.protocol (list "SSL" "SASL_SSL") }}true{{ end }}
{{- end }}

{{/* The Secret with the brokers' CA: as given, or Strimzi's cluster CA. */}}
{{- define "trialog.caSecret" -}}
{{- if include "trialog.usesTls" . }}
{{- if .Values.kafka.security.tls.caSecret }}
{{- .Values.kafka.security.tls.caSecret }}
{{- else if .Values.strimzi.enabled }}
{{- printf "%s-cluster-ca-cert" .Values.strimzi.clusterName }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The client certificate of one pod, as "secret/certKey/keyKey" or "":
the KafkaUser's own Secret for Strimzi tls users, else kafka.security.tls.clientSecret.
ctx = dict "root" $ "user" <KafkaUser name or "">.
*/}}
{{- define "trialog.clientCert" -}}
{{- $tls := .root.Values.kafka.security.tls }}
{{- if and .user (eq .root.Values.strimzi.users.authentication "tls") }}
{{- printf "%s/user.crt/user.key" .user }}
{{- else if and $tls.clientSecret (include "trialog.usesTls" .root) }}
{{- printf "%s/%s/%s" $tls.clientSecret $tls.certKey $tls.keyKey }}
{{- end }}
{{- end }}

{{/*
Connection settings of one pod, as the TRIALOG_* variables the CLI reads.
ctx = dict "root" $ "user" <KafkaUser name or "">.
*/}}
{{- define "trialog.kafkaEnv" -}}
{{- $root := .root }}
{{- $k := $root.Values.kafka }}
{{- $sasl := $k.security.sasl }}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: TRIALOG_BOOTSTRAP_SERVERS
  value: {{ include "trialog.bootstrapServers" $root | quote }}
- name: TRIALOG_TOPIC_PREFIX
  value: {{ $k.topicPrefix | quote }}
- name: TRIALOG_PARTITIONS
  value: {{ int $k.partitions | quote }}
- name: TRIALOG_REPLICATION_FACTOR
  value: {{ int $k.replicationFactor | quote }}
{{- /* Probes and scrapers come from outside the pod. */}}
- name: TRIALOG_HEALTH_HOST
  value: "0.0.0.0"
{{- /* One client id per pod, so broker logs and quotas tell the instances apart. */}}
- name: TRIALOG_CLIENT_ID
  value: "$(POD_NAME)"
- name: TRIALOG_SECURITY_PROTOCOL
  value: {{ $k.security.protocol | quote }}
{{- if include "trialog.usesSasl" $root }}
{{- if and .user (eq $root.Values.strimzi.users.authentication "scram-sha-512") }}
- name: TRIALOG_SASL_MECHANISM
  value: SCRAM-SHA-512
- name: TRIALOG_SASL_USERNAME
  value: {{ .user | quote }}
- name: TRIALOG_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .user }}
      key: password
{{- else }}
- name: TRIALOG_SASL_MECHANISM
  value: {{ $sasl.mechanism | quote }}
- name: TRIALOG_SASL_USERNAME
{{- if $sasl.username }}
  value: {{ $sasl.username | quote }}
{{- else }}
  valueFrom:
    secretKeyRef:
      name: {{ $sasl.existingSecret }}
      key: {{ $sasl.usernameKey }}
{{- end }}
- name: TRIALOG_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $sasl.existingSecret }}
      key: {{ $sasl.passwordKey }}
{{- end }}
{{- end }}
{{- if include "trialog.caSecret" $root }}
- name: TRIALOG_SSL_CAFILE
  value: /etc/trialog/kafka/ca/{{ $k.security.tls.caKey }}
{{- end }}
{{- with include "trialog.clientCert" . }}
{{- $parts := splitList "/" . }}
- name: TRIALOG_SSL_CERTFILE
  value: /etc/trialog/kafka/client/{{ index $parts 1 }}
- name: TRIALOG_SSL_KEYFILE
  value: /etc/trialog/kafka/client/{{ index $parts 2 }}
{{- end }}
- name: TRIALOG_LOG_FORMAT
  value: {{ $root.Values.logging.format | quote }}
- name: TRIALOG_LOG_LEVEL
  value: {{ $root.Values.logging.level | quote }}
{{- end }}

{{/* Volumes and mounts of the Kafka TLS files; ctx as for trialog.kafkaEnv. */}}
{{- define "trialog.kafkaVolumeMounts" -}}
{{- if include "trialog.caSecret" .root }}
- name: kafka-ca
  mountPath: /etc/trialog/kafka/ca
  readOnly: true
{{- end }}
{{- if include "trialog.clientCert" . }}
- name: kafka-client
  mountPath: /etc/trialog/kafka/client
  readOnly: true
{{- end }}
{{- end }}

{{- define "trialog.kafkaVolumes" -}}
{{- with include "trialog.caSecret" .root }}
- name: kafka-ca
  secret:
    secretName: {{ . }}
    defaultMode: 0440
    items:
      - key: {{ $.root.Values.kafka.security.tls.caKey }}
        path: {{ $.root.Values.kafka.security.tls.caKey }}
{{- end }}
{{- with include "trialog.clientCert" . }}
{{- $parts := splitList "/" . }}
- name: kafka-client
  secret:
    secretName: {{ index $parts 0 }}
    defaultMode: 0440
    items:
      - key: {{ index $parts 1 }}
        path: {{ index $parts 1 }}
      - key: {{ index $parts 2 }}
        path: {{ index $parts 2 }}
{{- end }}
{{- end }}

{{/* The topics of docs/design.md: values key and topic suffix. */}}
{{- define "trialog.topics" -}}
- key: control
  suffix: control
- key: events
  suffix: events
- key: trials
  suffix: trials
- key: models
  suffix: models
- key: deadLetters
  suffix: dead-letters
{{- end }}

{{/*
Least-privilege ACLs per role: which topics (by name under the prefix) each service
reads and writes, and for the analytics jobs the configs they describe, the topic
patterns they own ({prefix}: kafka.topicPrefix; Quix Streams' internal changelog__ and
repartition__ topics begin outside the prefix) and their transactional ids. The same
table as ROLE_ACLS and the patterns after it in trialog/broker/secure.py (the local
secured broker); tests/deploy checks that the two agree.
*/}}
{{- define "trialog.roleAcls" -}}
orchestrator: {read: [control, events], write: [events, trials, dead-letters]}
environment: {read: [events], write: [events, dead-letters]}
actors: {read: [events, trials, models], write: [events, dead-letters]}
logger: {read: [events, trials], write: [dead-letters]}
gateway: {read: [events, trials, analytics.trials, analytics.returns-by-pairing, analytics.environments, dead-letters], write: [control, events, dead-letters]}
learner: {read: [events, trials, models], write: [models, dead-letters]}
controller: {read: [events, trials, dead-letters], write: [control, events]}
analytics:
  read: [events]
  write: []
  describeConfigs: [events]
  ownedTopics: ["{prefix}analytics.", "changelog__{prefix}analytics--", "repartition__{prefix}analytics--"]
  transactionalIds: "{prefix}analytics-"
{{- end }}

{{/*
The keyring volume of a workload (trust.keyringSecret): core services mount every key;
an actor host only the keys of the implementations it serves (actors.<impl>), so it can
tag as its own actors and nobody else (docs/security.md).
*/}}
{{- define "trialog.keyringItems" -}}
{{- if eq .w.component "actors" }}
{{- $names := .w.values.implementations | default list }}
{{- if not $names }}{{ fail (printf "actors host %s: list its implementations so that it gets their keys only (trust.keyringSecret)" .w.key) }}{{ end }}
items:
{{- range $names }}
  - key: {{ printf "actors.%s" . | quote }}
    path: {{ printf "actors.%s" . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Where people reach the gateway (join links start with it): gateway.publicUrl, else
https://<ingress host> when the Ingress is on, else the Service's in-cluster address.
*/}}
{{- define "trialog.gatewayUrl" -}}
{{- $ctx := dict "root" . "w" (dict "key" "gateway" "component" "gateway" "host" "") -}}
{{- if .Values.gateway.publicUrl -}}
{{- .Values.gateway.publicUrl -}}
{{- else if .Values.gateway.ingress.enabled -}}
{{- printf "%s://%s" (ternary "https" "http" (ne .Values.gateway.ingress.tlsSecret "")) .Values.gateway.ingress.host -}}
{{- else -}}
{{- printf "http://%s.%s.svc:%d" (include "trialog.workloadName" $ctx) .Release.Namespace (int .Values.gateway.port) -}}
{{- end -}}
{{- end }}
