"""Join links (made by :func:`trialog.controller.join_link`): ``<gateway>/play?token=<join token>``, one seat of
one trial.

The token (:mod:`trialog.trust.join_tokens`) is self-contained, expiring, MACed with a key
derived from the deployment's ``seats`` secret, which the gateway holds. So any
gateway instance verifies any link, and minting one needs no round trip.
"""

from __future__ import annotations

from trialog.trust.join_tokens import JoinToken, verify_join_token
from trialog.trust.keys import Keyring, TrustError

REFUSALS = {
    "malformed": "this join link is damaged (not a Trialog join token): ask whoever started the trial for a new one",
    "forged": "this join link was not issued by this deployment: ask whoever started the trial for a new one",
}


def verify(keyring: Keyring, token: str) -> JoinToken:
    """The seat a token opens; :class:`TrustError` with a message for people otherwise."""
    try:
        return verify_join_token(keyring, token)
    except TrustError as exc:
        raise TrustError(REFUSALS.get(exc.reason, str(exc)), reason=exc.reason) from None
