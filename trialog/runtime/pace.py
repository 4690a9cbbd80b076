"""Where a user's code runs: inline on the event loop, or in a worker thread while its
calls are slow *and mostly wait*.

Inline, a call costs nothing extra but holds up every other trial of the process.
In a worker thread it holds up only its own trials — if it lets go of the
interpreter: threads do not run Python side by side. A call that waits (sleeps, I/O,
native code that releases the interpreter lock: a simulator's C core, XLA) lets the
loop go on meanwhile; a call that computes in Python only takes turns with it, and
several such calls in threads cost far more than the same calls inline (measured
with CoGrid's Overcooked: 16 trials ran at 60 % of their inline speed). So
:class:`Pace` moves calls off the loop when they take long on the clock while using
little CPU time of their own thread, judged on the latest calls, not on one: on a busy
machine any call is now and then stretched by preemption or a garbage collection.
Nothing moves before a few calls were seen (a first call is often slow: imports, a
model's compilation, a reset), and calls come back inline once they no longer both
take a quarter of the threshold and wait.

:func:`next_deadline` paces real-time trials: one tick per interval on a steady clock,
at a phase of the interval shared with other trials.
"""

from __future__ import annotations

import math
import time
import zlib
from collections import deque
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Calls longer than this on the clock, using a quarter of it or less in CPU (or a twentieth of
# their own time), move off the loop.
SLOW_S = 0.005


class Pace:
    """Whether one user's calls now run off the loop, from their recent wall and CPU times."""

    WINDOW = 5  # calls judged together
    FIRST = 3  # calls seen before any move

    def __init__(self, slow_s: float = SLOW_S):
        self.slow_s = slow_s
        self.off_loop = False
        self._recent: deque[tuple[bool, bool]] = deque()
        # Of the recent calls, how many waited past slow_s, and past slow_s / 4: moving off
        # the loop takes half of them waiting past slow_s, coming back fewer than half
        # waiting past slow_s / 4 (kept in O(1) per call: one per update of every trial).
        self._waited = [0, 0]
        self._last_s = 0.0  # the clock time of the latest timed call

    def record(self, seconds: float, cpu_seconds: float) -> None:
        """One call took ``seconds`` on the clock, ``cpu_seconds`` of its thread's CPU time."""
        waited = self._waited
        if len(self._recent) == self.WINDOW:
            gone = self._recent.popleft()
            waited[0] -= gone[0]
            waited[1] -= gone[1]
        # A call computes if it used a quarter of the threshold in CPU time and more than a twentieth
        # of its own time: on some virtual machines a sleeping thread's CPU clock gains a millisecond
        # or so at each wake-up, so a quarter-second sleep read as 1.3 ms of CPU, "computing".
        computing = cpu_seconds >= max(self.slow_s / 4, seconds / 20)
        call = (seconds > self.slow_s and not computing, seconds > self.slow_s / 4 and not computing)
        self._recent.append(call)
        waited[0] += call[0]
        waited[1] += call[1]
        n = len(self._recent)
        if n >= self.FIRST:
            self.off_loop = waited[1 if self.off_loop else 0] >= n - n // 2

    def timed(self, call: Callable[..., T], *args) -> T:
        """``call(*args)``, its times recorded (from the thread that makes the call).

        The thread's CPU clock is read only around a call that follows one longer than
        the threshold (others count as computing): reading it is a system call, measured
        at a sixth of a CoGrid step's cost per update on this project's virtual machines."""
        measure = self._last_s > self.slow_s
        began, began_cpu = time.perf_counter(), time.thread_time() if measure else 0.0
        try:
            return call(*args)
        finally:
            seconds = time.perf_counter() - began
            self._last_s = seconds
            self.record(seconds, time.thread_time() - began_cpu if measure else seconds)


GRID_S = 0.05  # real-time trials' phases: multiples of this within the interval (see next_deadline)


def trial_phase(trial_id: str, interval: float, grid: float = GRID_S) -> float:
    """Where in each interval a real-time trial's deadlines fall: one of the interval's grid
    steps, drawn from the trial ID (the same on any host, spread evenly over the steps)."""
    steps = max(1, round(interval / grid))  # not int(): 0.15 / 0.05 is 2.9999999999999996
    return (zlib.crc32(trial_id.encode()) % steps) * grid


def next_deadline(previous: float | None, now: float, interval: float, phase: float) -> float:
    """When a real-time trial's tick is due, its observations written at ``now`` (the event
    loop's clock): ``phase`` plus a whole number of intervals.

    One interval after the previous deadline — a steady clock: the few ms between a deadline
    and the observations it makes are not added to every tick. The first tick, and the one
    after a stall of more than half an interval, wait one to two intervals, to the phase.
    Trials of a host that share a phase are due at the same instant, stepped in the same turn
    of the event loop, and their records travel in the same requests on every hop: a
    real-time tick's cost is mostly per request (docs/performance.md). Spread over the
    interval's steps, the trials due together stay a small group: were every trial due at
    once, the last of them would wait for the whole burst on every hop."""
    if previous is not None and now - previous <= interval / 2:
        k = round((previous - phase) / interval) + 1
    else:
        k = math.ceil((now + interval - phase) / interval)
    return phase + k * interval
