"""Python's garbage collector, while a reader folds a partition.

A reader of many trials (:func:`trialog.datalog.replay.read_trials`) keeps what it folds
until the partition's read ends, so the heap grows all through the read. CPython (3.11)
runs a *full* collection, which traverses every tracked object of the process, each
time a quarter more objects than the last one kept have reached its oldest generation;
on a growing heap that is every few thousand records. Measured on the benchmark's
replay (146,092 records, 1,340 trials, one partition): 13 full collections of about
110 ms each, 18–20 % of the replay's time; the collector's young generations, which
find the short-lived garbage, took 9 %.

While any such read runs, full collections are put off; young ones run as before. What a
full collection would have found meanwhile — cycles that outlived two young collections
— is found by the first one after the last read ends, as soon as the usual rule asks
for it. The threshold is process-wide, hence a count of the reads under way (reads of
several tasks or threads overlap) and the previous threshold put back by the last.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

PUT_OFF = 1 << 30  # young collections of the second generation between full ones: never, in practice

_lock = threading.Lock()
_reads = 0
_oldest_threshold = 10


@contextlib.contextmanager
def full_collections_put_off() -> Iterator[None]:
    """Put off the collector's full collections until the ``with`` block (and every other
    one under way) ends."""
    global _reads, _oldest_threshold
    with _lock:
        if _reads == 0:
            young, middle, _oldest_threshold = gc.get_threshold()
            gc.set_threshold(young, middle, PUT_OFF)
        _reads += 1
    try:
        yield
    finally:
        with _lock:
            _reads -= 1
            if _reads == 0:
                young, middle, _ = gc.get_threshold()
                gc.set_threshold(young, middle, _oldest_threshold)
