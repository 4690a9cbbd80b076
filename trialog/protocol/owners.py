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
:mod:`trialog.services.orchestrator.handler`).

**Headers are never trusted without the body.** Headers only let a service
skip records cheaply; a record a service acts on is decoded, and its headers
must say the same as its body (:func:`check_headers`), else it is a bad record
of the kind's owner.

**Catch-up.** When a service takes over a partition it re-reads the log from
its safe point; records there were judged by the previous owner, so letters
are not sent again while a partition catches up (see
:meth:`trialog.runtime.service.ServiceLoop.dead_letter`).

Authentication failures are bad records too: checks plug into the owner's path
(:meth:`trialog.runtime.handler.Handler.must_judge` decides who reports; the check
raises or calls ``loop.dead_letter`` with its reason).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

from trialog.errors import CodecError
from trialog.protocol.events import (
    ENVIRONMENT_SENDER,
    HEADER_ID,
    HEADER_KIND,
    HEADER_RECEIVER,
    HEADER_REWARD,
    HEADER_SENDER,
    HEADER_TICK,
    Action,
    ActorTimeout,
    Event,
    Message,
    Observation,
    ParametersChanged,
    Reward,
    identity_from_headers,
)
from trialog.protocol.rewards import reward_bounds_problem
from trialog.protocol.roles import ACTORS, ENVIRONMENT, ORCHESTRATOR
from trialog.protocol.trial import matches, reaches

# Kinds owned by a service other than the orchestrator (see the table above).
_OWNERS: dict[str, str] = {
    Action.KIND: ENVIRONMENT,
    ParametersChanged.KIND: ENVIRONMENT,
    ActorTimeout.KIND: ENVIRONMENT,
    Observation.KIND: ACTORS,
}


def owner_of(kind: str | None) -> str:
    """The service role that dead-letters a bad record of ``kind`` in a running trial."""
    return _OWNERS.get(kind or "", ORCHESTRATOR)


def check_headers(key: bytes | None, headers: Sequence[tuple[str, bytes]], event: Event) -> None:
    """Raise :class:`CodecError` unless the record's key and headers say what its body says."""
    # The common case first, compared as bytes (every record a service acts on passes here);
    # equal bytes mean equal decoded headers, so anything else takes the exact path below.
    h = dict(headers)
    kind, tick, sender, receiver, id_ = event.identity
    if (
        key == event.trial_id.encode()
        and h.get(HEADER_KIND) == kind.encode()
        and h.get(HEADER_TICK) == str(tick).encode()
        and h.get(HEADER_SENDER) == sender.encode()
        and h.get(HEADER_RECEIVER) == receiver.encode()
        and h.get(HEADER_ID, b"") == id_.encode()
        and h.get(HEADER_REWARD) == (None if getattr(event, "reward", None) is None else b"1")
    ):
        return
    trial = key.decode(errors="replace") if key else ""
    if trial != event.trial_id:
        raise CodecError(f"record key {trial!r} is not the trial of its body ({event.trial_id!r})")
    carries = getattr(event, "reward", None) is not None
    if h.get(HEADER_REWARD) != (b"1" if carries else None):
        said = "no reward header" if h.get(HEADER_REWARD) is None else f"reward header {h[HEADER_REWARD]!r}"
        body = "carries a reward" if carries else "carries none"
        raise CodecError(f"headers do not match the body: {said} but the body {body}")
    said = identity_from_headers(headers)
    if said != event.identity:
        names = ("kind", "tick", "sender", "receiver", "id")
        diff = ", ".join(
            f"{n} header {h!r} but body {b!r}" for n, h, b in zip(names, said, event.identity, strict=True) if h != b
        )
        raise CodecError(f"headers do not match the body: {diff}")


# --- rules the owners and the datalog share ---------------------------------------------------
# The orchestrator dead-letters a reward or message that breaks these; the datalog's fold
# (trialog.datalog.samples), live delivery (trialog.runtime.actor_runtime, trialog.client_actor),
# controllers' returns and the analytics jobs skip the same records, so what is lettered
# is never counted and what counts is never lettered. Pure functions of the record, the
# trial's current tick and its actors: the gateway judges with them too.


def reward_problem(reward: Reward, current_tick: int, actors: Mapping[str, str] | None) -> str | None:
    """Why a reward cannot count (None: it counts). ``current_tick``: the trial's latest
    tick; ``actors``: name -> actor class, when known.

    A reward counts when its value and confidence are within bounds
    (:func:`trialog.protocol.rewards.reward_bounds_problem`), its tick is between 0 and the current
    one, its receiver is not its sender, and — with the actors known — its receiver
    reaches an actor other than the sender (:func:`trialog.protocol.trial.reaches`: ``*``
    and ``class.*`` leave the sender out), and its user data is JSON."""
    problem = reward_bounds_problem(reward.value, reward.confidence)
    if problem is not None:
        return problem
    if not 0 <= reward.tick <= current_tick:
        return f"reward for tick {reward.tick}: a reward is for a tick between 0 and the current one ({current_tick})"
    receiver, sender = reward.receiver, reward.sender
    if receiver == sender:
        return f"reward from {sender!r} to itself: nobody rewards itself"
    if actors is not None and not any(reaches(receiver, sender, a, c) for a, c in actors.items()):
        if any(matches(receiver, a, c) for a, c in actors.items()):
            return (
                f"reward from {sender!r} for {receiver!r}, which reaches no actor but its sender "
                "(a wildcard leaves its sender out)"
            )
        return f"reward for {receiver!r}, which addresses no actor of the trial"
    return _json_problem(reward.user_data, "reward user_data")


def message_problem(message: Message, current_tick: int, actors: Mapping[str, str] | None) -> str | None:
    """Why a message cannot count (None: it counts). ``current_tick``: the trial's latest
    tick; ``actors``: name -> actor class, when known — then every receiver must address
    someone in the trial: an actor's name, ``*``, ``class.*`` of one of its classes, or
    ``env`` (the environment)."""
    if not 0 <= message.tick <= current_tick:
        return (
            f"message at tick {message.tick}: a message is sent at a tick between 0 and the current one "
            f"({current_tick})"
        )
    if not message.receivers:
        return "message with no receiver"
    if actors is not None:
        for r in message.receivers:
            if not (
                r in actors or r == "*" or r == ENVIRONMENT_SENDER or (r.endswith(".*") and r[:-2] in actors.values())
            ):
                return (
                    f"message for {r!r}, which addresses nobody in the trial "
                    "(an actor's name, *, class.* of a class of the trial, or env)"
                )
    return _json_problem(message.payload, "message payload")


def _json_problem(text: str | None, what: str) -> str | None:
    if text is None:
        return None  # optional and absent
    try:
        orjson.loads(text)
    except ValueError as exc:
        return f"{what} is not valid JSON: {exc}"
    return None
