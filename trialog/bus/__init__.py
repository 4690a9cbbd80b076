"""The Kafka edge: the only place that talks to a broker (or its in-memory stand-in).

May import the protocol (records, topics, codecs), trust (tags are checked and written
here), telemetry, settings and errors; never the runtimes, the tools or a service.
"""

from trialog.bus.base import Bus, Consumer, Delivered, Record, partition_for

__all__ = ["Bus", "Consumer", "Delivered", "Record", "partition_for", "connect"]


def connect(settings) -> Bus:
    """The bus for a settings object: a real Kafka cluster."""
    from trialog.bus.kafka import KafkaBus

    return KafkaBus(settings)
