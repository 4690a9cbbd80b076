"""Who dead-letters what: one owner per record, so each bad record is reported exactly once.

Every record a Trialog service reads gets one of two outcomes: it is applied
(once — a repeat of an event already applied is a no-op, I-8), or it is parked
on ``dead-letters`` with its reason by exactly one service. Several services
read every record of a trial, so "exactly one" needs a rule that each of them
can evaluate alone, from the same log prefix, with the same answer:

=============================  =============================================================
record                         owner
=============================  =============================================================
anything on ``control``        orchestrator
``action``                     the environment service hosting the trial
``parameters.changed``         the environment service hosting the trial
``actor.timeout``              the environment service hosting the trial
``observation``                the actor service playing the receiving actor
every other kind (lifecycle,   orchestrator
``reward``, ``message``, …)
unknown, missing, non-UTF-8    orchestrator
or mismatched ``kind``
a trial that is not running    orchestrator (whatever the kind: unknown trials, trials still
                               waiting for client actors, ended trials, observations for an
                               actor no actor service plays — e.g. a client seat)
=============================  =============================================================

"Running" means: a ``trial.started`` was read and no ``trial.ended`` since.
Every service tracks that for the trials it hosts, the orchestrator for all of
them, so the table resolves to one service per record. The only gap is a
running trial whose environment (or actor implementation) no service hosts:
its environment-owned records have no owner until the orchestrator ends the
trial for want of an environment (see ``environment_timeout_s`` in
:mod:`services.orchestrator.service`).

**Headers are never trusted without the body.** Headers only let a service
skip records cheaply; a record a service acts on is decoded, and its headers
must say the same as its body (:func:`check_headers`), else it is a bad record
of the kind's owner.

**Catch-up.** When a service takes over a partition it re-reads the log from
its safe point; records there were judged by the previous owner, so letters
are not sent again while a partition catches up (see
:meth:`trialog.runtime.service.ServiceLoop.dead_letter`).

Authentication failures are bad records too: checks plug into the owner's path
(:meth:`trialog.runtime.service.Handler.owns` decides who reports; the check
raises or calls ``loop.dead_letter`` with its reason).
"""

from __future__ import annotations

import math

import orjson
from collections.abc import Mapping, Sequence

from trialog.errors import CodecError
from trialog.events import Event, Message, Reward, identity_from_headers
from trialog.runtime.trial import matches

ORCHESTRATOR = "orchestrator"
ENVIRONMENT = "environment"
ACTORS = "actors"

# Kinds owned by a service other than the orchestrator (see the table above).
_OWNERS: dict[str, str] = {
    "action": ENVIRONMENT,
    "parameters.changed": ENVIRONMENT,
    "actor.timeout": ENVIRONMENT,
    "observation": ACTORS,
}


def owner_of(kind: str | None) -> str:
    """The service role that dead-letters a bad record of ``kind`` in a running trial."""
    return _OWNERS.get(kind or "", ORCHESTRATOR)


def check_headers(key: bytes | None, headers: Sequence[tuple[str, bytes]], event: Event) -> None:
    """Raise :class:`CodecError` unless the record's key and headers say what its body says."""
    trial = key.decode(errors="replace") if key else ""
    if trial != event.trial_id:
        raise CodecError(f"record key {trial!r} is not the trial of its body ({event.trial_id!r})")
    said = identity_from_headers(headers)
    if said != event.identity:
        names = ("kind", "tick", "sender", "receiver", "id")
        diff = ", ".join(f"{n} header {h!r} but body {b!r}" for n, h, b in zip(names, said, event.identity, strict=True) if h != b)
        raise CodecError(f"headers do not match the body: {diff}")


# --- rules the owners and the datalog share ---------------------------------------------------
# The orchestrator dead-letters a reward or message that breaks these; the datalog's fold
# (trialog.datalog.samples) skips the same records, so the archive holds what was applied.


def reward_problem(reward: Reward, current_tick: int, actors: Mapping[str, str] | None) -> str | None:
    """Why a reward cannot count (None: it counts). ``current_tick``: the trial's latest
    tick; ``actors``: name -> actor class, when known."""
    if not math.isfinite(reward.value):
        return f"reward value {reward.value} is not a finite number"
    if not math.isfinite(reward.confidence) or reward.confidence < 0:
        return f"reward confidence {reward.confidence} is not a finite number >= 0"
    if not 0 <= reward.tick <= current_tick:
        return f"reward for tick {reward.tick}: a reward is for a tick between 0 and the current one ({current_tick})"
    if actors is not None and not any(matches(reward.receiver, a, c) for a, c in actors.items()):
        return f"reward for {reward.receiver!r}, which addresses no actor of the trial"
    return _json_problem(reward.user_data, "reward user_data")


def message_problem(message: Message, current_tick: int) -> str | None:
    """Why a message cannot count (None: it counts)."""
    if not 0 <= message.tick <= current_tick:
        return f"message at tick {message.tick}: a message is sent at a tick between 0 and the current one ({current_tick})"
    if not message.receivers:
        return "message with no receiver"
    return _json_problem(message.payload, "message payload")


def _json_problem(text: str | None, what: str) -> str | None:
    if text is None:
        return None  # optional and absent
    try:
        orjson.loads(text)
    except ValueError as exc:
        return f"{what} is not valid JSON: {exc}"
    return None
