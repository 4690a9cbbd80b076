"""The collector's full collections put off while a reader folds a partition (trialog.datalog.collector)."""

import asyncio
import gc

import pytest

from trialog.datalog.collector import PUT_OFF, full_collections_put_off


@pytest.fixture(autouse=True)
def _threshold():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_full_collections_are_put_off_for_the_read_and_the_threshold_comes_back():
    with full_collections_put_off():
        assert gc.get_threshold() == (700, 10, PUT_OFF)
    assert gc.get_threshold() == (700, 10, 10)


def test_the_threshold_comes_back_when_the_read_fails():
    with pytest.raises(RuntimeError), full_collections_put_off():
        raise RuntimeError("the broker went away")
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_reads_put_back_the_threshold_once_the_last_ends():
    """Two tasks' reads overlap, the first ending first: the threshold stays put off until
    the second ends, then is what it was before either began, not what the second saw."""

    async def read(started: asyncio.Event, release: asyncio.Event) -> tuple[int, int, int]:
        with full_collections_put_off():
            started.set()
            await release.wait()
            return gc.get_threshold()

    async def main():
        first_started, second_started = asyncio.Event(), asyncio.Event()
        release_first, release_second = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(read(first_started, release_first))
        await first_started.wait()
        second = asyncio.create_task(read(second_started, release_second))
        await second_started.wait()
        release_first.set()
        assert await first == (700, 10, PUT_OFF)
        assert gc.get_threshold() == (700, 10, PUT_OFF)  # the second read is still under way
        release_second.set()
        assert await second == (700, 10, PUT_OFF)
        assert gc.get_threshold() == (700, 10, 10)

    asyncio.run(main())


def test_young_collections_set_meanwhile_are_kept():
    """Only the oldest generation's threshold is the reader's: a change to the young ones made
    during the read (by the application) stays."""
    with full_collections_put_off():
        gc.set_threshold(5000, 20, PUT_OFF)
    assert gc.get_threshold() == (5000, 20, 10)
