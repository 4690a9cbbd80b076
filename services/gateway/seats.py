"""Join links: which seat (trial, client actor) a browser asks for.

A link is ``<gateway>/play?token=<token>``; the token names one seat of one trial.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import orjson

from trialog.errors import TrialogError


class SeatRefused(TrialogError):
    """A join was refused; the message is shown on the page as it is."""


@dataclass(frozen=True)
class Seat:
    trial_id: str
    actor: str


def mint(trial_id: str, actor: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps({"trial": trial_id, "actor": actor})).decode().rstrip("=")


def verify(token: str) -> Seat:
    try:
        claims = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        return Seat(str(claims["trial"]), str(claims["actor"]))
    except Exception:
        raise SeatRefused("this join link is not valid: ask whoever started the trial for a new one") from None


def link(base_url: str, trial_id: str, actor: str) -> str:
    return f"{base_url.rstrip('/')}/play?token={mint(trial_id, actor)}"
