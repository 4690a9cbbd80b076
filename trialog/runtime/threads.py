"""The threads NumPy's BLAS runs on, in a service and in an in-process run.

OpenBLAS starts a thread per core and splits a large enough product over them; after each
split its threads spin, waiting for the next one. A service's matrices are small (its heavy
math, JAX's, has threads of its own) and the machine's cores are the other services' and the
broker's. Measured on 2 cores (docs/learning.md): PPO's learner service kept a thread spinning
for 14 s of a 121–135 s run, a quarter of its CPU; the PPO preset in-process took 80–88 s of CPU
for 40–45 s of wall clock with it, 45–47 s for 36–39 s without; TD3's update took 94 ms on two
threads against 2.9 ms on one.
"""

from __future__ import annotations

import contextlib


def one_blas_thread() -> contextlib.AbstractContextManager:
    """NumPy's BLAS on one thread: from now on, or for a ``with`` block (threadpoolctl)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")
