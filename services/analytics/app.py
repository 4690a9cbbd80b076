"""The analytics service: the shipped jobs (:mod:`trialog.services.analytics.jobs`) wired on Quix Streams.

One Quix ``Application`` (consumer group ``<prefix>analytics``) runs both stages:
``events`` → per-trial fold → ``analytics.trials``; ``analytics.trials`` → re-keyed by
group (one repartition topic) → per-group fold → ``analytics.<job>``. Every result
topic is compacted. With ``exactly-once`` (the default) state changes, outputs and
consumer offsets commit in one Kafka transaction: a job killed at any moment restarts
from its last commit, its state restored from the changelog topics. More instances
of the group share the partitions (state moves with them).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import uuid
from pathlib import Path

from trialog.analytics import EventDeserializer, quix_connection, result_topic
from trialog.protocol.topics import EVENTS
from trialog.runtime.process import run_async
from trialog.services.analytics.jobs import KINDS, SUMMARY_JOBS, contributions, fold_group, fold_trial, group_key
from trialog.settings import Settings
from trialog.telemetry import metrics
from trialog.telemetry.logs import get_logger
from trialog.trust.authenticator import Authenticator
from trialog.trust.keys import Keyring

log = get_logger(__name__)

TRANSACTION_TIMEOUT_MS = 10_000


def build(
    settings: Settings,
    *,
    state_dir: str | Path,
    window: int = 20,
    guarantee: str = "exactly-once",
    commit_interval: float = 1.0,
    replication_factor: int = 0,
):
    """The Quix Application running every shipped job (call ``.run()`` on it). Its own topics
    get ``replication_factor`` copies (0: the setting's, else one)."""
    from quixstreams import Application
    from quixstreams.models.topics import TopicConfig

    app = Application(
        broker_address=quix_connection(settings),
        consumer_group=settings.group("analytics"),
        auto_offset_reset="earliest",
        processing_guarantee=guarantee,
        state_dir=str(state_dir),
        commit_interval=commit_interval,
        loglevel="WARNING",
        on_message_processed=lambda topic, partition, offset: metrics.ANALYTICS_RECORDS.labels(topic).inc(),
        producer_extra_config={
            # A killed instance leaves its open transaction behind (each instance has a fresh
            # transactional id); the broker aborts it after this long, and until then readers
            # of the result topics (read_committed) wait at it. Checkpoints take ~1 s.
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            # Named with the group (Quix's default is a bare UUID), so that a prefixed ACL
            # on transactional ids covers this deployment's instances and nobody else's.
            "transactional.id": transactional_id(settings),
        },
        # Like every Trialog service: a dead instance's partitions move after 10 s, not 45.
        consumer_extra_config={"session.timeout.ms": 10_000, "heartbeat.interval.ms": 1_000},
    )
    copies = replication_factor or settings.replication_factor or 1
    compacted = TopicConfig(  # acknowledged once two copies have a write, as Trialog's own topics
        num_partitions=settings.partition_count(),
        replication_factor=copies,
        extra_config={"cleanup.policy": "compact", "min.insync.replicas": str(min(2, copies))},
    )
    trust = Authenticator(Keyring.load(settings))  # only records written by a key allowed to count
    events = app.topic(
        settings.topic(EVENTS), key_deserializer="str", value_deserializer=EventDeserializer(KINDS, trust=trust)
    )
    trials = app.topic(result_topic(settings, "trials"), key_serializer="str", value_serializer="json",
                       key_deserializer="str", value_deserializer="json", config=compacted)  # fmt: skip
    outputs = {
        job: app.topic(result_topic(settings, job), key_serializer="str", value_serializer="json", config=compacted)
        for job in SUMMARY_JOBS
    }

    per_trial = (
        app.dataframe(events).apply(fold_trial, stateful=True, metadata=True).filter(lambda result: result is not None)
    )
    per_trial.to_topic(trials)

    per_group = app.dataframe(trials).apply(contributions, expand=True).group_by(group_key, name="groups")
    per_group = per_group.apply(functools.partial(fold_group, window=window), stateful=True)
    per_group.to_topic(
        lambda summary, key, timestamp, headers: outputs[summary["job"]], key=lambda summary: summary["key"]
    )
    return app


def transactional_id(settings: Settings) -> str:
    """``<prefix>analytics-<random>``: one per instance (trialog.broker.secure's ACL pattern)."""
    return f"{settings.group('analytics')}-{uuid.uuid4().hex}"


def main(settings: Settings, *, state_dir: str, window: int, guarantee: str, health_port: int) -> None:
    """Run the jobs until SIGTERM/SIGINT (Quix handles both), serving health and metrics."""
    events = run_async(_wait_for_events_topic(settings))
    # The jobs' topics as replicated as the events topic they are computed from.
    replicas = settings.replication_factor or (events or {}).get("replication_factor", 1)
    app = build(settings, state_dir=state_dir, window=window, guarantee=guarantee, replication_factor=replicas)
    if health_port:
        threading.Thread(
            target=_serve_health, args=(settings.health_host, health_port), daemon=True, name="health"
        ).start()
    log.info(
        "analytics starting", group=settings.group("analytics"), state_dir=state_dir, guarantee=guarantee, window=window
    )
    app.run()
    log.info("analytics stopped")


async def _wait_for_events_topic(settings: Settings, within_s: float = 60.0) -> dict | None:
    """Wait until the broker knows the events topic: Quix stops for good on a subscribed topic
    it does not find, and topics created a moment before (a deployment starting, a test) may
    not be in the broker's answers yet. After ``within_s`` Quix's own error says what is missing.
    Returns the topic as ``describe_topics`` has it (None if it never showed)."""
    from trialog.bus.kafka import KafkaBus

    bus = KafkaBus(settings)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            described = await bus.describe_topics()
            if settings.topic(EVENTS) in described:
                return described[settings.topic(EVENTS)]
        except Exception as exc:  # the broker not reachable yet: the same wait
            log.info("waiting for the events topic", reason=str(exc))
        await asyncio.sleep(0.5)


def _serve_health(host: str, port: int) -> None:
    """/livez, /readyz and /metrics from a thread of their own: Quix runs its loop in the main thread.
    Live and ready while the process runs (the Quix loop's own progress shows in
    trialog_analytics_records_total)."""
    import asyncio

    from trialog.telemetry.health import Health, serve_health

    async def serve() -> None:
        health = Health()
        health.set_ready(True)
        await serve_health(health, host, port)
        while True:
            health.beat()
            await asyncio.sleep(1)

    run_async(serve())
