"""One error family for everything Trialog raises on purpose.

Every error says what went wrong and, where it can, what to do about it.
``retriable`` tells a caller whether trying again later may succeed (as in aiokafka).
"""

from __future__ import annotations


class TrialogError(Exception):
    """Base class of every error Trialog raises on purpose."""

    retriable: bool = False


class SettingsError(TrialogError):
    """A setting is missing or malformed (flag, environment variable or file)."""


class SpecError(TrialogError):
    """The spec file is invalid; the message names the file, the path inside it and the problem."""

    def __init__(self, message: str, *, file: str | None = None, path: str | None = None):
        where = ""
        if file:
            where = f"{file}"
        if path:
            where = f"{where}: {path}" if where else path
        super().__init__(f"{where}: {message}" if where else message)
        self.file = file
        self.path = path
        self.problem = message


class CodecError(TrialogError):
    """Bytes that cannot be decoded, an unknown schema, or a value that does not match its schema."""


class BrokerError(TrialogError):
    """The local development broker could not be fetched, started or reached."""


class TransportError(TrialogError):
    """Kafka could not be reached or refused a request."""

    retriable = True


class TopicMissingError(TransportError):
    """A topic to read does not exist (yet): create the topics, or run what writes it."""

    retriable = False


class TrialError(TrialogError):
    """A trial was rejected, failed, or was asked for something it cannot do."""

    def __init__(self, message: str, *, trial_id: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.trial_id = trial_id
        self.reason = reason


class TrialTimeout(TrialError, TimeoutError):
    """No answer about a trial in time (also a :class:`TimeoutError`, for ``asyncio`` code)."""


class RecordsTooLarge(TrialError):
    """Records larger than their topic takes (``max.message.bytes``): refused before
    producing, so that they never reach (and never stall) the producer. The other
    records of the same send were delivered.

    ``refused``: index in the send -> why; ``delivered``: index -> where it landed."""

    def __init__(self, refused: dict[int, str], delivered: dict, *, trial_id: str | None = None):
        first = next(iter(refused.values()))
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        super().__init__(
            f"{first}{more}: send less (e.g. a smaller observation or config), or raise the topic's max.message.bytes",
            trial_id=trial_id,
            reason="record too large",
        )
        self.refused = refused
        self.delivered = delivered


class BadRecord(TrialogError):
    """A record its owning service cannot apply (wrong tick, unknown actor, invalid value…).

    Raised by a handler for a record it owns (see :mod:`trialog.protocol.owners`): the
    service loop dead-letters the record with this message as the reason."""
