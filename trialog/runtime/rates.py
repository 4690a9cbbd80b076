"""A token bucket: what the gateway refuses past (``take``), and what a client that must stay
under such a limit waits for (``reserve``) — one rule on both sides of the socket."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Bucket:
    """``rate`` tokens a second, in bursts of up to ``burst`` (default two seconds' worth)."""

    rate: float
    burst: float = 0.0
    stamp: float = field(default_factory=time.monotonic)
    tokens: float = field(init=False)

    def __post_init__(self) -> None:
        self.burst = self.burst or max(1.0, 2 * self.rate)
        self.tokens = self.burst

    def _refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def take(self, now: float) -> bool:
        """One token now, if there is one."""
        self._refill(now)
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False

    def reserve(self, now: float) -> float:
        """One token, owed if need be: the seconds until it is there (0 if it is now). Those who
        reserve one after the other are served in that order."""
        self._refill(now)
        self.tokens -= 1
        return max(0.0, -self.tokens / self.rate)
