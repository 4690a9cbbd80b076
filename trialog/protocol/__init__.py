"""The wire protocol: what every record on the log is and who may write it.

The event types (:mod:`~trialog.protocol.events`) and their Avro encodings
(:mod:`~trialog.protocol.codec`, :mod:`~trialog.protocol.codec_flat`,
:mod:`~trialog.protocol.event_codec`), the topics
(:mod:`~trialog.protocol.topics`), what a started trial is
(:mod:`~trialog.protocol.trial`), the rules for rewards (:mod:`~trialog.protocol.rewards`,
I-4) and for who dead-letters what (:mod:`~trialog.protocol.owners`), what one actor
received (:mod:`~trialog.protocol.inbox`), and the action spaces schemas carry with the
random valid actions drawn from them (:mod:`~trialog.protocol.spaces`). docs/protocol.md is
the same contract in words, for services in any language.

May import: the standard library, fastavro/orjson/numpy, :mod:`trialog.errors`,
:mod:`trialog.settings`, :mod:`trialog.telemetry` and the user API's plain types
(:mod:`trialog.environment`). Never the bus, the runtimes, trust or anything above them:
everything else stands on this package (pyproject.toml's import contracts).
"""
