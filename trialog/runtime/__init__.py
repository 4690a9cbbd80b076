"""The runtimes that carry user code through trials: the service loop every service runs
(:mod:`~trialog.runtime.service`: consume, handle, emit, rebuild from the log; what each
service implements for it, :mod:`~trialog.runtime.handler`), the actor
runtime (:mod:`~trialog.runtime.actor_runtime`) and the environment runtime with its tick
barrier (:mod:`~trialog.runtime.environment_runtime`), where user code runs
(:mod:`~trialog.runtime.pace`), a long-lived process around service loops
(:mod:`~trialog.runtime.process`) and the threads NumPy's BLAS runs on there
(:mod:`~trialog.runtime.threads`).

May import the protocol, trust, the bus, the model registry and the user API (what a
user implements: :mod:`trialog.actor`, :mod:`trialog.environment`); never the tools, the
command line or a service. The services in ``services/`` are built from these.
"""
