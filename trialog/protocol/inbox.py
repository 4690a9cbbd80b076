"""What one actor received in one trial: each reward and message once, and the
answer to a conformance probe.

Delivery is at least once (I-8): a reward of one (tick, sender) and a message of one
(sender, message id) reach the actor once, however often the log holds them. A
*probe* (docs/protocol.md, "Conformance") is a message whose payload is
``{"trialog.probe": ID}``; the actor's service answers it — not the user's code — with
everything received so far, so that ``trialog conformance`` can check delivery from
outside, in any language.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from trialog.protocol.events import Message, Reward

PROBE = "trialog.probe"


@dataclass
class Received:
    rewards: list[list[Any]] = field(default_factory=list)  # [tick, sender, value], in log order
    messages: list[list[Any]] = field(default_factory=list)  # [tick, sender, message_id]
    _seen: set[tuple] = field(default_factory=set)

    def reward(self, reward: Reward) -> bool:
        """Record a reward; False when it is a repeat (same tick and sender)."""
        key = ("reward", reward.tick, reward.sender)
        if key in self._seen:
            return False
        self._seen.add(key)
        self.rewards.append([reward.tick, reward.sender, reward.value])
        return True

    def message(self, message: Message, actor: str, payload: Any) -> tuple[bool, Message | None]:
        """Record a message to ``actor``: (deliver it to the actor?, the probe answer to send)."""
        key = ("message", message.sender, message.message_id)
        if key in self._seen:
            return False, None
        self._seen.add(key)
        pid = probe_id(payload)
        if pid is None:
            self.messages.append([message.tick, message.sender, message.message_id])
            return True, None
        body = {f"{PROBE}.ack": pid, "rewards": self.rewards, "messages": self.messages}
        answer = Message(
            message.trial_id,
            tick=message.tick,
            sender=actor,
            receivers=(message.sender,),
            message_id=f"probe-{pid}",
            payload=orjson.dumps(body).decode(),
        )
        return False, answer


def probe_id(payload: Any) -> str | None:
    value = payload.get(PROBE) if isinstance(payload, dict) else None
    return value if isinstance(value, str) else None
