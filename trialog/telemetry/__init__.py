"""What a running service tells its operator: logs (:mod:`~trialog.telemetry.logs`),
Prometheus metrics (:mod:`~trialog.telemetry.metrics`) and the health endpoints
(:mod:`~trialog.telemetry.health`).

May import the standard library, structlog and prometheus_client, :mod:`trialog.errors`
and :mod:`trialog.settings` only: every other package may log and count.
"""
