"""Dead letters for people: each letter as a JSON-ready dict, with what its kind of reason
usually means and what to do (``trialog dead-letters``, the gateway's dashboard).

Every bad record lands in ``dead-letters`` once, with its reason (who sends it:
:mod:`trialog.protocol.owners`); this reads the topic to its current end and explains
each letter by its reason.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from trialog.protocol.events import HEADER_KIND, DeadLetter
from trialog.protocol.topics import DEAD_LETTERS
from trialog.telemetry.metrics import reason_category

# (words found in a reason, what it usually means and what to do): the first match explains.
EXPLANATIONS = (
    # An observation carrying the environment's reward is refused for it before anything else
    # is said of its bytes (trialog.protocol.event_codec, trialog.protocol.owners.check_headers).
    (
        "reward header",
        "an observation whose `reward` header and body disagree: the header is `1` exactly when the "
        "observation carries the environment's reward; fix the writer, see docs/protocol.md",
    ),
    (
        "observation carries",
        "an observation carrying the environment's reward out of bounds (|value| <= 1e12, finite): "
        "fix the environment, see docs/protocol.md",
    ),
    ("carries no reward", "an observation of tick 0 carrying a reward: no step came before it to be rewarded"),
    (
        "undecodable",
        "the value is not a Trialog event in a schema the services know (Avro single-object encoding): "
        "fix the writer, see docs/protocol.md",
    ),
    (
        "refused",
        "not tagged by a key allowed to write it — forged, or written by a service without its key: "
        "check the writer's keyring (docs/security.md)",
    ),
    ("not live", "addressed to a trial that is unknown or already ended: a late, misrouted or forged record"),
    ("schema", "its payload does not match the actor class's schema in trial.started: the writer uses another schema"),
    (
        "batch",
        "Kafka could not read the batch it was in (corrupt, or compressed with a codec the consumer lacks): "
        "docs/reliability.md",
    ),
    ("bytes", "larger than the topic allows: docs/reliability.md says how records are sized"),
    ("json", "a JSON field (message, reward user data, parameters) is not a JSON object"),
    (
        "finite number between",
        "a reward's value or confidence is out of bounds (|value| <= 1e12, 0 <= confidence <= 1e6, finite): "
        "docs/protocol.md",
    ),
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
            out.append(
                {
                    "offset": record.offset,
                    "service": "?",
                    "reason": f"not a dead letter: {exc}",
                    "category": "not a dead letter",
                    "explanation": "something other than a Trialog service wrote to the dead-letters topic",
                    "trial_id": record.trial_id,
                    "kind": "",
                }
            )
            continue
        out.append(letter_json(letter, record.offset))
    return sorted(out, key=lambda item: (item.get("time") or "", item["offset"]))
