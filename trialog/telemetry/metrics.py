"""Prometheus metrics: every definition in one place, served on each service's health port.

``GET /metrics`` on the port of ``/livez`` and ``/readyz`` (see :mod:`trialog.telemetry.health`)
answers in Prometheus' text format. Services change the counters below with
one-line hooks where the thing happens; what can be read off a service loop at
scrape time (live trials, catch-up, consumer lag, loop progress) is collected
then, so the hot path pays nothing for it.

Counting rules, so that metrics can be checked against the log:

* work redone while a partition **catches up** after a crash or a rebalance is
  not counted again (the hooks count only on live partitions; the previous
  owner counted it);
* label values come from bounded sets (implementation names from the spec,
  end reasons, event kinds, the category of a dead letter's reason — the text
  before its first ``:``), never from trial IDs.

The metric names are part of the Helm chart's Grafana dashboard
(``helm/trialog/dashboards/trialog.json``); rename one there too.
"""

from __future__ import annotations

import re
import time
import weakref
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

if TYPE_CHECKING:
    from trialog.runtime.service import ServiceLoop

__all__ = ["CONTENT_TYPE_LATEST", "exposition", "watch_loop"]

# --- the tick (environment hosts) ------------------------------------------------------------------------------
TICKS = Counter(
    "trialog_ticks", "Ticks stepped (one environment update each), per environment implementation.", ["environment"]
)
TICK_SECONDS = Histogram(
    "trialog_tick_seconds",
    "Time of a tick seen by the environment: from writing observations of tick t to its update for t done "
    "(two Kafka hops, the actors' decisions and the update).",
    ["environment"],
    buckets=(0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
ACTIONS_TIMED_OUT = Counter(
    "trialog_actions_timed_out", "Actions that missed their response timeout (actor.timeout written).", ["environment"]
)

# --- trials (orchestrator) ----------------------------------------------------------------------------------------
TRIALS_ENDED = Counter("trialog_trials_ended", "Trials ended, by the reason in their trial.ended.", ["reason"])
REWARDS = Counter(
    "trialog_rewards",
    "Rewards logged: 'live' for the current tick, 'retroactive' for an earlier one (or after the trial's end).",
    ["timing"],
)

# --- every service ----------------------------------------------------------------------------------------------
DEAD_LETTERS = Counter(
    "trialog_dead_letters",
    "Records dead-lettered by this service, by event kind and reason category.",
    ["service", "kind", "reason"],
)
PUBLISH_RETRIES = Counter("trialog_publish_retries", "Sends to Kafka that failed and were retried.", ["service"])

# --- analytics jobs ------------------------------------------------------------------------------------------
ANALYTICS_RECORDS = Counter(
    "trialog_analytics_records", "Records processed by the analytics jobs, per input topic.", ["topic"]
)

# --- actor hosts following a model (set by the learning agents) ----------------------------------------------------
MODEL_VERSION = Gauge(
    "trialog_model_version", "Version of the model an actor implementation currently serves.", ["implementation"]
)

_loops: weakref.WeakSet[ServiceLoop] = weakref.WeakSet()
_learners: weakref.WeakSet = weakref.WeakSet()  # learner handlers: implementation, settled_steps()


def watch_learner(handler) -> None:
    """Report this learner's settled steps at each scrape (``trialog_learner_settled_steps``)."""
    _learners.add(handler)


def watch_loop(loop: ServiceLoop) -> None:
    """Report this loop's live trials, partitions and progress at each scrape."""
    _loops.add(loop)


def reason_category(reason: str) -> str:
    """A dead letter's reason without its details (bounded label values)."""
    head = reason.split(":", 1)[0]
    head = re.sub(r"'[^']*'|\"[^\"]*\"|-?\d+(\.\d+)?(e[+-]?\d+)?|\b(nan|inf)\b", "_", head)  # names, ticks, values
    return head.strip()[:80] or "unspecified"


def exposition() -> bytes:
    """The text a ``GET /metrics`` answers."""
    return generate_latest(REGISTRY)


class _LoopCollector:
    """Gauges read off the service loops of this process when Prometheus scrapes."""

    def collect(self):
        live = GaugeMetricFamily(
            "trialog_live_trials", "Trials this service holds state for right now.", labels=["service", "group"]
        )
        catching_up = GaugeMetricFamily(
            "trialog_partition_catching_up",
            "1 while a partition is being rebuilt from the log after an assignment (I-7), else 0.",
            labels=["service", "group", "topic", "partition"],
        )
        lag = GaugeMetricFamily(
            "trialog_consumer_lag",
            "Records of a partition not yet read by this service (log end − position).",
            labels=["service", "group", "topic", "partition"],
        )
        since_turn = GaugeMetricFamily(
            "trialog_loop_seconds_since_turn",
            "Seconds since the service loop last finished a turn (liveness looks at it).",
            labels=["service", "group"],
        )
        log_away = GaugeMetricFamily(
            "trialog_log_away",
            "1 while the log is away for the service loop (no answer for seconds: trialog.runtime.log_watch), else 0.",
            labels=["service", "group"],
        )
        now = time.monotonic()
        for loop in list(_loops):
            service, group = loop.handler.service_name, loop.group or ""
            live.add_metric([service, group], loop.handler.live_trial_count())
            log_away.add_metric([service, group], 1 if loop.log.away else 0)
            since_turn.add_metric([service, group], now - loop.turned_at)
            for (role, partition), part in list(loop.parts.items()):
                labels = [service, group, role, str(partition)]
                catching_up.add_metric(labels, 0 if part.live else 1)
                end = loop.consumer.highwater(role, partition) if loop.consumer is not None else None
                lag.add_metric(labels, max(0, (end if end is not None else part.end) - part.position))
        yield from (live, catching_up, lag, since_turn, log_away)
        settled = GaugeMetricFamily(
            "trialog_learner_settled_steps",
            "Env steps a learner has taken in, once every round they owe is trained and its version "
            "published (the newest version on `models` has seen them all); -1 while one is owed.",
            labels=["implementation"],
        )
        for handler in list(_learners):
            settled.add_metric([handler.implementation], handler.settled_steps())
        yield settled


REGISTRY.register(_LoopCollector())
