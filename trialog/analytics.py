"""Stream analytics over the log, on Quix Streams: Trialog's deserializers, connection
settings and result topics, so that an analytics job is a few lines.

.. code-block:: python

    from quixstreams import Application
    from trialog.analytics import EventDeserializer, quix_connection
    from trialog.settings import Settings

    settings = Settings.load()
    app = Application(broker_address=quix_connection(settings), consumer_group=settings.group("my-job"),
                      auto_offset_reset="earliest", processing_guarantee="exactly-once")
    events = app.topic(settings.topic("events"), key_deserializer="str",
                       value_deserializer=EventDeserializer(kinds={"trial.ended"}))
    app.dataframe(events).apply(lambda ended: print(ended.trial_id, ended.reason))
    app.run()

Why Quix Streams (docs/analytics.md says more): its state lives in RocksDB backed by
compacted changelog topics and is committed together with the consumer offsets and
the outputs in one Kafka transaction (``processing_guarantee="exactly-once"``), so a
job killed at any moment restarts from its last commit without counting anything
twice; it scales out like every Trialog service, by adding instances to its consumer
group (state follows the partitions); and it is a plain Python library over
librdkafka, with no cluster of its own to run.

The shipped jobs (``trialog serve analytics``, in ``services/analytics/``) write their
results to compacted topics ``<prefix>analytics.<job>``, JSON values keyed by what they
summarise; :func:`read_results` reads the latest value per key from any of them.
"""

from __future__ import annotations

from typing import Any

import orjson

from trialog.errors import CodecError, TopicMissingError, TrialogError
from trialog.protocol.codec import SchemaStore
from trialog.protocol.event_codec import EventCodec
from trialog.protocol.events import BY_KIND, HEADER_KIND, HEADER_REWARD, Event, Observation, ResolvedTrial, Reward
from trialog.protocol.owners import check_headers
from trialog.settings import Settings

# The shipped jobs' result topics, `<prefix>analytics.<job>`, and what each is keyed by.
RESULT_TOPICS = {
    "trials": "trial ID: the trial's returns, pairing, phase, ticks, tick timing, reward sources",
    "returns-by-pairing": "implementation pairing: trials, mean return, rolling mean of the last N trials",
    "returns-by-phase": "experiment/phase: the same, per experiment phase",
    "environments": "environment implementation: ticks, ticks/s and tick interval (mean, max)",
    "human-vs-agent": "environment: mean returns of human (client) seats and of agents in the same trials, wins",
    "reward-sources": "reward sender (env/<component>, a judge…): total, count, mean per trial",
}


def result_topic(settings: Settings, job: str) -> str:
    return settings.topic(f"analytics.{job}")


def quix_connection(settings: Settings):
    """Quix Streams' connection config from Trialog's settings (SASL/TLS included)."""
    from quixstreams.kafka.configuration import ConnectionConfig

    options: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers,
        "security_protocol": settings.security_protocol,
    }
    if settings.security_protocol.startswith("SASL"):
        options.update(
            sasl_mechanism=settings.sasl_mechanism,
            sasl_username=settings.sasl_username,
            sasl_password=settings.sasl_password,
        )
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        options.update(
            {
                k: v
                for k, v in (
                    ("ssl_ca_location", settings.ssl_cafile),
                    ("ssl_certificate_location", settings.ssl_certfile),
                    ("ssl_key_location", settings.ssl_keyfile),
                )
                if v
            }
        )
    return ConnectionConfig(**options)


def kind_of(headers) -> str | None:
    """The event kind from a record's headers (Quix gives them as a list of (name, bytes))."""
    for name, value in headers or ():
        if name == HEADER_KIND and value is not None:
            try:
                return value.decode() if isinstance(value, bytes) else str(value)
            except UnicodeDecodeError:
                return None
    return None


def __getattr__(name: str) -> Any:
    # Quix Streams takes most of a second to import and every `trialog` command imports this
    # module (for `trialog analytics`): only code that asks for the deserializer pays for it.
    if name == "EventDeserializer":
        globals()[name] = cls = _event_deserializer_class()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _event_deserializer_class() -> type:
    try:
        from quixstreams.models.serializers import Deserializer as _QuixDeserializer
        from quixstreams.models.serializers.exceptions import IgnoreMessage
    except ImportError:  # the analytics extra is not installed: EventDeserializer() says so
        _QuixDeserializer, IgnoreMessage = object, None

    class EventDeserializer(_QuixDeserializer):
        """A Quix Streams value deserializer: ``events`` records into Trialog's typed events.

        ``kinds`` limits decoding to those event kinds, read from the headers first (the
        others are skipped without decoding, which is most of the stream for most jobs).
        With ``trust`` (a :class:`trialog.trust.authenticator.Authenticator`, e.g. ``connect(settings).trust``)
        only records tagged by a key allowed to write them count, as in every Trialog
        service (docs/security.md). Records that do not decode or are refused are skipped
        and counted in ``skipped``: the service that owns them dead-letters them; an
        analytics job only reads.

        The environment's reward an observation carries (:meth:`Observation.carried_reward`)
        reaches a job that reads rewards as the :class:`Reward` it stands for, just before the
        observation (if the job reads observations too): a job counts it as the record it
        replaces. So one record may give two events (Quix's ``split_values``).
        """

        split_values = True  # each value is a list of events, handled one by one

        def __init__(
            self, kinds: set[str] | frozenset[str] | None = None, store: SchemaStore | None = None, trust=None
        ):
            if IgnoreMessage is None:
                raise TrialogError("stream analytics need Quix Streams: pip install 'trialog[analytics]'")
            unknown = set(kinds or ()) - set(BY_KIND)
            if unknown:
                raise TrialogError(f"unknown event kind(s) {sorted(unknown)}; known: {sorted(BY_KIND)}")
            self.kinds = frozenset(kinds) if kinds else None
            self.codec = EventCodec(store)
            self.trust = trust
            self.skipped = 0

        def __call__(self, value: bytes, ctx) -> list[Event]:
            kind = kind_of(ctx.headers)
            # An observation carrying a reward, for a job that reads rewards but not observations:
            # decoded for its reward alone. Its header says so (the body is checked against it below).
            carried_only = (
                self.kinds is not None
                and kind == Observation.KIND
                and kind not in self.kinds
                and Reward.KIND in self.kinds
                and HEADER_REWARD in dict(ctx.headers or ())
            )
            if self.kinds is not None and kind not in self.kinds and not carried_only:
                raise IgnoreMessage()
            try:
                event = self.codec.decode(value, kind)
            except CodecError:
                self.skipped += 1
                raise IgnoreMessage() from None
            if self.trust is not None:
                # The record key is the trial ID (I-1) and Quix hands a deserializer the value only:
                # the body's trial ID stands in; a record keyed otherwise fails its tag, as it should.
                if self.trust.check(event.trial_id.encode(), ctx.headers or [], value) is not None:
                    self.skipped += 1
                    raise IgnoreMessage()
                if isinstance(event, ResolvedTrial):
                    self.trust.learn(event)  # who plays whom: the keys of the trial's records
            if type(event) is not Observation:
                return [event]
            try:
                # An observation whose headers do not say what its body says counts nowhere (its owner
                # dead-letters it), nor does the reward it would carry.
                check_headers(event.trial_id.encode(), list(ctx.headers or ()), event)
            except CodecError:
                self.skipped += 1
                raise IgnoreMessage() from None
            if event.reward is None or (self.kinds is not None and Reward.KIND not in self.kinds):
                return [event]
            return [event.carried_reward()] if carried_only else [event.carried_reward(), event]

    return EventDeserializer


async def read_results(bus, job: str) -> dict[str, Any]:
    """The latest result per key of one job's result topic (empty if the job never ran)."""
    if job not in RESULT_TOPICS:
        raise TrialogError(f"no analytics job {job!r}; the jobs are: {', '.join(RESULT_TOPICS)}")
    try:
        return await bus.read_latest(f"analytics.{job}", orjson.loads)
    except TopicMissingError:
        return {}  # the job has not run yet
