"""An actor that cannot play says so, and its trial ends at once (docs/protocol.md, "An
actor that cannot play").

When an actor cannot play — its agent could not be built, its session raised — its
service writes a message from that actor to ``env`` whose JSON payload is
``{"trialog.cannot_play": REASON}``. It is an ordinary message: written on ``events``
under the actor's own key (an actor service never writes ``control``), and judged like
any message by the orchestrator, which then ends the trial with reason ``error`` and
REASON in the details, rather than leaving the environment to time the actor out tick
after tick. The environment reads it as any message to ``env``.
"""

from __future__ import annotations

import orjson

from trialog.protocol.events import ENVIRONMENT_SENDER, Message

CANNOT_PLAY = "trialog.cannot_play"


def cannot_play(trial_id: str, tick: int, actor: str, reason: str) -> Message:
    """The message saying ``actor`` cannot play, and why. One per actor and trial: its
    ``message_id`` is fixed, so a replay writes the same message (I-8)."""
    return Message(
        trial_id,
        tick=tick,
        sender=actor,
        receivers=(ENVIRONMENT_SENDER,),
        message_id=f"{actor}-cannot-play",
        payload=orjson.dumps({CANNOT_PLAY: reason}).decode(),
    )


def cannot_play_reason(message: Message) -> str | None:
    """Why the message's sender cannot play, if the message says so (None otherwise)."""
    if CANNOT_PLAY not in message.payload:  # most messages: not parsed at all
        return None
    try:
        payload = orjson.loads(message.payload)
    except ValueError:
        return None
    reason = payload.get(CANNOT_PLAY) if isinstance(payload, dict) else None
    return reason if isinstance(reason, str) else None
