"""The topics of a Trialog deployment (docs/design.md, "Topics and partitions") and their configs.

``control`` and ``events`` always get the same partition count, so that Kafka's
default partitioner puts a trial in the same partition number of both (I-2).
"""

from __future__ import annotations

from dataclasses import dataclass

from trialog.settings import Settings

CONTROL = "control"
EVENTS = "events"
TRIALS = "trials"
MODELS = "models"
DEAD_LETTERS = "dead-letters"
ROLES = (CONTROL, EVENTS, TRIALS, MODELS, DEAD_LETTERS)
# Roles written in transactions (the analytics jobs' results, exactly-once): their readers
# read committed records only. Trialog's own producers are not transactional, and a
# read_committed consumer costs more per fetch (measured: a fifth of the single-trial
# Overcooked throughput of bench/run.py, with 8 partitions).
TRANSACTIONAL_PREFIX = "analytics."

WEEK_MS = 7 * 24 * 3600 * 1000

# The largest record (batch) each topic takes: set on the topics we create, checked
# before producing (trialog.bus), so that an oversized record is refused with a clear
# error instead of failing inside the producer. Kafka's own default is about 1 MB.
RECORD_LIMIT = 1024 * 1024
MODEL_RECORD_LIMIT = 8 * 1024 * 1024  # weights travel inline when they fit


@dataclass(frozen=True)
class TopicPlan:
    role: str
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]


def plan(settings: Settings, brokers: int = 1, local_instances: int | None = None) -> list[TopicPlan]:
    """What ``trialog topics create`` makes on a cluster of ``brokers`` (for a local run whose
    largest service has ``local_instances``: :meth:`Settings.partition_count`), with the configs
    each topic needs: a write is acknowledged once two copies have it, where there are two."""
    p, rf = settings.partition_count(local_instances), settings.replicas(brokers)
    common = {"min.insync.replicas": str(min(2, rf)), "max.message.bytes": str(RECORD_LIMIT)}
    return [
        TopicPlan(
            CONTROL,
            settings.topic(CONTROL),
            p,
            rf,
            {**common, "cleanup.policy": "delete", "retention.ms": str(WEEK_MS)},
        ),
        # The datalog: kept as long as the deployment says (forever by default).
        TopicPlan(
            EVENTS,
            settings.topic(EVENTS),
            p,
            rf,
            {
                **common,
                "cleanup.policy": "delete",
                "retention.ms": str(settings.events_retention_ms),
                "retention.bytes": "-1",
            },
        ),
        # An index: trial ID -> latest TrialRecord. Compaction keeps the latest only.
        TopicPlan(TRIALS, settings.topic(TRIALS), p, rf, {**common, "cleanup.policy": "compact"}),
        TopicPlan(
            MODELS,
            settings.topic(MODELS),
            1,
            rf,
            {**common, "cleanup.policy": "compact", "max.message.bytes": str(MODEL_RECORD_LIMIT)},
        ),
        TopicPlan(
            DEAD_LETTERS,
            settings.topic(DEAD_LETTERS),
            1,
            rf,
            {**common, "cleanup.policy": "delete", "retention.ms": str(4 * WEEK_MS)},
        ),
    ]


def record_limits(settings: Settings) -> dict[str, int]:
    """Role -> the largest record the topic takes, as the plan creates it."""
    return {t.role: int(t.configs["max.message.bytes"]) for t in plan(settings)}
