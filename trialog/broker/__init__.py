"""A real local Apache Kafka broker for development and CI: ``trialog broker start|stop|status``.

The first ``start`` fetches the Kafka jars from Maven Central with Maven (``mvn``) into
a cache outside the repository; every ``start`` then runs a single KRaft node (broker
and controller in one JVM) on 127.0.0.1 whose data directory survives stop/start,
because the Kafka log is Trialog's datalog. ``start`` prints the bootstrap address as
the last line on stdout, so ``export TRIALOG_BOOTSTRAP_SERVERS=$(trialog broker start)``
works; everything else goes to stderr. docs/broker.md is the user's page.

One module per job: :mod:`~trialog.broker.config` (where and how the broker runs),
:mod:`~trialog.broker.java` (the Java it runs on), :mod:`~trialog.broker.download`
(Kafka's jars, fetched with Maven), :mod:`~trialog.broker.storage` (its data dir),
:mod:`~trialog.broker.process` (start, stop, status and the readiness probe) and
:mod:`~trialog.broker.secure` (``--secure``: TLS, SASL and the roles' ACLs). The command
line is :mod:`trialog.commands.broker`.

What it may import: the standard library, orjson, :mod:`trialog.errors`,
:mod:`trialog.telemetry.logs`, :mod:`trialog.protocol.topics` and :mod:`trialog.settings`;
aiokafka (the readiness probe) and cryptography (``--secure``) only inside the functions
that need them, so that ``trialog broker status`` runs without them. Nothing here imports
the bus, the runtimes or the services: a broker is what they connect to.
"""
