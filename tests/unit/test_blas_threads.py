"""NumPy's BLAS on one thread wherever a preset runs: a service process, whatever it hosts
(trialog.runtime.process.serve), and an in-process run (trialog/runtime/threads.py says why)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from threadpoolctl import threadpool_info, threadpool_limits

from tests.unit.test_learn_in_process import tiny_dqn
from trialog.learn.in_process import train_in_process
from trialog.learn.train import Preset

# In a process of its own: the limit is the process's for its life, and the test's must stay as it was.
SERVED = textwrap.dedent(
    """
    import asyncio

    from threadpoolctl import threadpool_info

    from trialog.bus.memory import MemoryBus
    from trialog.runtime.process import serve
    from trialog.settings import Settings


    def blas_threads():
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


    async def main():
        stop = asyncio.Event()

        async def look():
            await asyncio.sleep(0.05)  # serve is running its loops
            print("serving", blas_threads())
            stop.set()

        print("before", blas_threads())
        looking = asyncio.create_task(look())
        await serve(MemoryBus(Settings.load({}, environ={})), [], name="test", stop=stop)
        await looking


    asyncio.run(main())
    """
)


def test_a_service_runs_numpys_blas_on_one_thread():
    # Two threads to start with, whatever this machine's cores: the limit must be what changes it.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", SERVED], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert lines["before"] == "[2]"
    assert lines["serving"] == "[1]"


def blas_threads() -> list[int]:
    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


def test_an_in_process_run_is_on_one_blas_thread_and_gives_the_caller_its_own_back(tmp_path, monkeypatch):
    seen: list[list[int]] = []
    run_in_process = Preset.run_in_process

    def looking(preset, run):  # notes the BLAS threads the preset runs with
        seen.append(blas_threads())
        return run_in_process(preset, run)

    monkeypatch.setattr(Preset, "run_in_process", looking)
    with threadpool_limits(limits=2, user_api="blas"):
        train_in_process(tiny_dqn(), tmp_path, quiet=True)
        assert seen == [[1]]
        assert blas_threads() == [2]
