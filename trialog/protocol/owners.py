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
(:meth:`trialog.runtime.service.Handler.owns` decides who reports; the check
raises or calls ``loop.dead_letter`` with its reason).
"""

from __future__ import annotations

import base64
from collections import Counter
from datetime import UTC, datetime

import orjson
from collections.abc import Mapping, Sequence

from trialog.errors import CodecError
from trialog.protocol.events import ENVIRONMENT as ENVIRONMENT_NAME
from trialog.protocol.events import HEADER_ID, HEADER_KIND, HEADER_RECEIVER, HEADER_SENDER, HEADER_TICK, DeadLetter, Event, Message, Reward, identity_from_headers
from trialog.telemetry.metrics import reason_category
from trialog.protocol.rewards import reward_bounds_problem
from trialog.protocol.trial import matches, reaches
from trialog.protocol.topics import DEAD_LETTERS

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
    ):
        return
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
            return f"reward from {sender!r} for {receiver!r}, which reaches no actor but its sender (a wildcard leaves its sender out)"
        return f"reward for {receiver!r}, which addresses no actor of the trial"
    return _json_problem(reward.user_data, "reward user_data")


def message_problem(message: Message, current_tick: int, actors: Mapping[str, str] | None) -> str | None:
    """Why a message cannot count (None: it counts). ``current_tick``: the trial's latest
    tick; ``actors``: name -> actor class, when known — then every receiver must address
    someone in the trial: an actor's name, ``*``, ``class.*`` of one of its classes, or
    ``env`` (the environment)."""
    if not 0 <= message.tick <= current_tick:
        return f"message at tick {message.tick}: a message is sent at a tick between 0 and the current one ({current_tick})"
    if not message.receivers:
        return "message with no receiver"
    if actors is not None:
        for r in message.receivers:
            if not (r in actors or r == "*" or r == ENVIRONMENT_NAME or (r.endswith(".*") and r[:-2] in actors.values())):
                return f"message for {r!r}, which addresses nobody in the trial (an actor's name, *, class.* of a class of the trial, or env)"
    return _json_problem(message.payload, "message payload")


def _json_problem(text: str | None, what: str) -> str | None:
    if text is None:
        return None  # optional and absent
    try:
        orjson.loads(text)
    except ValueError as exc:
        return f"{what} is not valid JSON: {exc}"
    return None


# --- reading them: `trialog dead-letters` ------------------------------------------------------------------
# Every bad record lands in ``dead-letters`` once, with its reason; this reads the topic
# to its current end and prints each letter and, per reason, what usually causes it.

# (words found in a reason, what it usually means and what to do): the first match explains.
EXPLANATIONS = (
    ("undecodable", "the value is not a Trialog event in a schema the services know (Avro single-object encoding): fix the writer, see docs/protocol.md"),
    ("refused", "not tagged by a key allowed to write it — forged, or written by a service without its key: check the writer's keyring (docs/security.md)"),
    ("not live", "addressed to a trial that is unknown or already ended: a late, misrouted or forged record"),
    ("schema", "its payload does not match the actor class's schema in trial.started: the writer uses another schema"),
    ("batch", "Kafka could not read the batch it was in (corrupt, or compressed with a codec the consumer lacks): docs/reliability.md"),
    ("bytes", "larger than the topic allows: docs/reliability.md says how records are sized"),
    ("json", "a JSON field (message, reward user data, parameters) is not a JSON object"),
    ("finite number between", "a reward's value or confidence is out of bounds (|value| <= 1e12, 0 <= confidence <= 1e6, finite): docs/protocol.md"),
    ("itself", "a reward naming its own sender as receiver: nobody rewards itself"),
    ("but its sender", "a reward to * or class.* from the only actor it would reach: a wildcard leaves its sender out"),
    ("addresses no", "a reward or message for a name, class.* or address that is not in the trial"),
    ("tick", "its tick is not one the trial can take (in the past, far ahead, or negative)"),
)
GENERIC = "see the reason; docs/reliability.md and docs/protocol.md list what gets a record dead-lettered"


def explain(reason: str) -> str:
    lowered = reason.lower()
    return next((text for words, text in EXPLANATIONS if words in lowered), GENERIC)


def letter_json(letter: DeadLetter, offset: int) -> dict:
    kind = (letter.headers.get(HEADER_KIND) or b"").decode(errors="replace")
    return {
        "offset": offset,  # in the dead-letters topic
        "time": datetime.fromtimestamp(letter.timestamp_ms / 1000, UTC).isoformat() if letter.timestamp_ms else None,
        "service": letter.service,
        "reason": letter.reason,
        "category": reason_category(letter.reason),
        "explanation": explain(letter.reason),
        "topic": letter.topic,
        "partition": letter.partition,
        "record_offset": letter.offset,
        "trial_id": (letter.key or b"").decode(errors="replace"),
        "kind": kind,
        "headers": {k: (v or b"").decode(errors="replace") for k, v in letter.headers.items()},
        "value_base64": base64.b64encode(letter.value).decode() if letter.value else None,
    }


async def read_letters(bus) -> list[dict]:
    """Every dead letter in the topic now, oldest first, as :func:`letter_json` dicts."""
    out = []
    async for record in bus.read_to_end(DEAD_LETTERS):
        try:
            letter = DeadLetter(**bus.store.decode(record.value, DeadLetter.SCHEMA))
        except Exception as exc:  # not a letter: say so rather than drop it
            out.append({"offset": record.offset, "service": "?", "reason": f"not a dead letter: {exc}", "category": "not a dead letter",
                        "explanation": "something other than a Trialog service wrote to the dead-letters topic", "trial_id": record.trial_id, "kind": ""})  # fmt: skip
            continue
        out.append(letter_json(letter, record.offset))
    return sorted(out, key=lambda item: (item.get("time") or "", item["offset"]))


def add_cli(sub) -> None:
    from trialog.commands.parts import command

    p = command(sub, "dead-letters", "List the records services could not use, with their reasons, and explain each kind of reason.")
    p.add_argument("--json", action="store_true", help="one JSON object per letter (value as base64)")
    p.add_argument("--trial", metavar="TRIAL_ID", help="only letters of this trial")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="list the last N letters (default %(default)s; 0: all); the summary counts all")
    p.set_defaults(func=_command)


def _command(args) -> int:
    from trialog.bus import connect
    from trialog.commands.parts import run_async
    from trialog.errors import TopicMissingError
    from trialog.settings import from_args

    async def go():
        async with connect(from_args(args)) as bus:
            try:
                return await read_letters(bus)
            except TopicMissingError:
                return []

    letters = [item for item in run_async(go()) if not args.trial or item["trial_id"] == args.trial]
    if args.json:
        for item in letters:
            print(orjson.dumps(item).decode())
        return 0
    if not letters:
        print("no dead letters")
        return 0
    shown = letters[-args.limit :] if args.limit else letters
    for item in shown:
        print(f"{item.get('time') or '-':32} {item['service']:12} {item.get('kind') or '-':18} {item['trial_id'][:24]:24} {item['reason']}")
    counts = Counter(item["category"] for item in letters)
    example = {item["category"]: item["reason"] for item in letters}
    print(f"\n{len(letters)} dead letter(s){f', the last {len(shown)} shown' if len(shown) < len(letters) else ''}; by reason:")
    for category, n in counts.most_common():
        print(f"  {n:>5}  {category}\n         {explain(example[category])}")
    return 0
