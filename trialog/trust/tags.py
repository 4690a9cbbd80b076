"""Record tags: the ``mac.<key id>`` headers, what they are computed over, HMAC-SHA256.

A tag is a header ``mac.<key id>`` whose value is the 32-byte
``HMAC-SHA256(key, input)`` with

    input = LP("trialog.mac.v1") || LP(record key) || LP(kind) || LP(tick) || LP(sender)
            || LP(receiver) || LP(id) || LP(holder) || LP(takeover) || LP(value)

where ``LP`` is as in :mod:`trialog.trust.keys`, ``kind``, ``tick``, ``sender``,
``receiver``, ``id``, ``holder``, ``takeover`` are the raw bytes of those headers (empty
when absent; ``tick`` is its decimal header text), the record key is the trial ID and
``value`` the record's value bytes. A record is tagged with its **sender's key**, and also
with the key of each actor it is addressed to (observations, timeouts, rewards and
messages to actors, and every lifecycle record with each actor key of its trial), so that
an actor service or seat verifies what it reads with its own key
(:class:`trialog.trust.authenticator.Authenticator` decides which keys; the ``holder`` and
``takeover`` headers are the seat's, :mod:`trialog.trust.seats`).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from trialog.trust.keys import length_prefixed

MAC_PREFIX = "mac."
HEADER_HOLDER = "holder"
HEADER_TAKEOVER = "takeover"
MAC_LABEL = b"trialog.mac.v1"

# Header names the MAC input is made of, in order (between the record key and the value).
MAC_HEADERS = ("kind", "tick", "sender", "receiver", "id", HEADER_HOLDER, HEADER_TAKEOVER)

_LABEL_LP = length_prefixed(MAC_LABEL)
_LENGTHS = [n.to_bytes(4, "big") for n in range(4096)]  # the length prefixes of most fields, made once


def mac_input(key: bytes, headers: Mapping[str, bytes], value: bytes) -> bytes:
    """The bytes a tag is computed over (see the module docstring). Runs for every record
    written and read, hence written out as one join rather than looped over ``MAC_HEADERS``."""
    g, n = headers.get, _LENGTHS
    kind, tick, sender, receiver = g("kind", b""), g("tick", b""), g("sender", b""), g("receiver", b"")
    id_, holder, takeover = g("id", b""), g(HEADER_HOLDER, b""), g(HEADER_TAKEOVER, b"")
    try:
        return b"".join((
            _LABEL_LP, n[len(key)], key, n[len(kind)], kind, n[len(tick)], tick, n[len(sender)], sender,
            n[len(receiver)], receiver, n[len(id_)], id_, n[len(holder)], holder, n[len(takeover)], takeover,
            len(value).to_bytes(4, "big"), value,
        ))  # fmt: skip
    except IndexError:  # a header longer than the table (a forged record, most likely)
        fields = (key, kind, tick, sender, receiver, id_, holder, takeover, value)
        return _LABEL_LP + b"".join(len(f).to_bytes(4, "big") + f for f in fields)


def compute_tag(secret: bytes, message: bytes) -> bytes:
    return hmac.digest(secret, message, "sha256")


_XOR_36 = bytes(b ^ 0x36 for b in range(256))  # HMAC's inner and outer pads, as translation tables
_XOR_5C = bytes(b ^ 0x5C for b in range(256))


class MacKey:
    """HMAC-SHA256 (RFC 2104) under one key with its two padded key blocks hashed once:
    per record that saves more than half of what :func:`compute_tag` costs (measured
    0.7 against 1.6 µs for a tick's record), and every record is tagged or checked."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, secret: bytes):
        if len(secret) > 64:  # SHA-256's block size; longer keys are hashed first (RFC 2104)
            secret = hashlib.sha256(secret).digest()
        block = secret.ljust(64, b"\0")
        self._inner = hashlib.sha256(block.translate(_XOR_36))
        self._outer = hashlib.sha256(block.translate(_XOR_5C))

    def tag(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()
