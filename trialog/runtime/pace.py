"""Where a user's code runs: inline on the event loop while its calls are quick, in a
worker thread while they are slow.

Inline, a call costs nothing extra but holds up every other trial of the process;
in a worker thread it costs a hop (about 0.1 ms, a good part of a fast tick) and
holds up only its own trials. :class:`Pace` decides from the wall time of the
latest calls — their median, not one call: on a busy machine a trivial call is now
and then stretched past any threshold by preemption or a garbage collection, and
a fast trial sent off the loop for good by one such call would pay the hop on
every tick thereafter. A pace that went off the loop comes back once its calls
are clearly quick again (a quarter of the threshold), so a slow first call (a
model's compilation, a reset) does not decide either.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Pace:
    """The recent wall times of one user's calls, and whether they now run off the loop."""

    WINDOW = 5  # calls the median is taken over

    def __init__(self, slow_s: float):
        self.slow_s = slow_s
        self.off_loop = False
        self._recent: deque[float] = deque(maxlen=self.WINDOW)

    def record(self, seconds: float) -> None:
        self._recent.append(seconds)
        ordered = sorted(self._recent)
        median = ordered[len(ordered) // 2]
        self.off_loop = median > (self.slow_s / 4 if self.off_loop else self.slow_s)

    def timed(self, call: Callable[..., T], *args) -> T:
        """``call(*args)``, its wall time recorded (from the thread that makes the call)."""
        began = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.record(time.perf_counter() - began)
