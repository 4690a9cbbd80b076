"""Join tokens: a self-contained, expiring token that gives one seat of one trial.

``tl1.<payload>.<mac>``: ``payload`` is base64url (no padding) of the JSON object
``{"actor", "exp" (Unix seconds), "seat_key" (base64url), "trial"}`` and ``mac``
base64url of ``HMAC-SHA256(derive(seats, "join-token"), "tl1." + payload)``
(``derive``: :mod:`trialog.trust.keys`). Minted by whoever holds ``seats``
(:func:`mint_join_token`, no round trip); verified by the gateway
(:func:`verify_join_token`, reasons ``malformed``, ``forged``, ``expired``,
``wrong_trial``, ``wrong_actor``); a client reads its seat key from it
(:func:`read_join_token`).
"""

from __future__ import annotations

import binascii
import hmac
import time
from dataclasses import dataclass

import orjson

from trialog.protocol.roles import SEATS
from trialog.trust.keys import Keyring, TrustError, b64url, derive, seat_key_id, unb64url
from trialog.trust.tags import compute_tag

TOKEN_PREFIX = "tl1."


@dataclass(frozen=True, slots=True)
class JoinToken:
    trial_id: str
    actor: str
    expires_at: int  # Unix seconds
    seat_key: bytes


def _token_key(keyring: Keyring) -> bytes:
    master = keyring.key(SEATS)
    if master is None:
        raise TrustError(f"join tokens need the seats key, which {keyring.source} does not hold")
    return derive(master, "join-token")


def mint_join_token(
    keyring: Keyring, trial_id: str, actor: str, *, ttl_s: float = 3600, now: float | None = None
) -> str:
    """A self-contained, expiring token for one seat of one trial (no round trip)."""
    seat_key = keyring.key(seat_key_id(actor), trial_id)
    key = _token_key(keyring)
    assert seat_key is not None  # the seats master is held (checked above)
    expires = int((time.time() if now is None else now) + ttl_s)
    payload = b64url(
        orjson.dumps(
            {"actor": actor, "exp": expires, "seat_key": b64url(seat_key), "trial": trial_id},
            option=orjson.OPT_SORT_KEYS,
        )
    )
    signed = TOKEN_PREFIX + payload
    return f"{signed}.{b64url(compute_tag(key, signed.encode()))}"


def read_join_token(token: str) -> JoinToken:
    """The claims of a token, unverified (a client reads its seat key; the log decides the rest)."""
    try:
        if not token.startswith(TOKEN_PREFIX):
            raise ValueError("does not start with tl1.")
        payload, _mac = token[len(TOKEN_PREFIX) :].split(".")
        claims = orjson.loads(unb64url(payload))
        return JoinToken(
            str(claims["trial"]), str(claims["actor"]), int(claims["exp"]), unb64url(str(claims["seat_key"]))
        )
    except (ValueError, KeyError, TypeError, binascii.Error, orjson.JSONDecodeError) as exc:
        raise TrustError(f"not a Trialog join token ({exc}); ask for a new join link", reason="malformed") from None


def verify_join_token(
    keyring: Keyring, token: str, *, trial_id: str | None = None, actor: str | None = None, now: float | None = None
) -> JoinToken:
    """The token's claims if it is genuine, unexpired and for this trial and actor; else
    :class:`TrustError` whose ``reason`` is malformed, forged, expired, wrong_trial or wrong_actor."""
    claims = read_join_token(token)
    signed, _, mac = token.rpartition(".")
    try:
        genuine = hmac.compare_digest(compute_tag(_token_key(keyring), signed.encode()), unb64url(mac))
    except (binascii.Error, ValueError):
        genuine = False
    if not genuine or keyring.key(seat_key_id(claims.actor), claims.trial_id) != claims.seat_key:
        raise TrustError("this join link was not issued by this deployment (forged or altered)", reason="forged")
    if (time.time() if now is None else now) >= claims.expires_at:
        raise TrustError(
            f"this join link expired at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(claims.expires_at))}; "
            "ask for a new one",
            reason="expired",
        )
    if trial_id is not None and claims.trial_id != trial_id:
        raise TrustError(f"this join link is for trial {claims.trial_id}, not {trial_id}", reason="wrong_trial")
    if actor is not None and claims.actor != actor:
        raise TrustError(f"this join link is for seat {claims.actor}, not {actor}", reason="wrong_actor")
    return claims
