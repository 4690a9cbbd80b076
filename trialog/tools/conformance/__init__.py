"""``trialog conformance``: check an actor (or environment) service, in any language, against the protocol.

The suite plays the other side of the log itself — it writes ``trial.started``,
steps the spec's own environment in-process and writes its observations and rewards,
then ``trial.ended`` — so it controls every tick: it injects rewards, messages,
duplicates and probes between ticks, and SIGKILLs and restarts the service under test
mid-trial. The service under test is a command (``--command``), or for a Python
implementation of the spec, ``trialog serve actors``. Every actor of the trials is
played by the implementation under test. One line per check and a summary; exit code
0 only when every check passed. docs/protocol.md ("Conformance") describes the checks
and the probe they rely on.

One module per job: :mod:`~trialog.tools.conformance.trial` (a conformance trial: the
service under test, the trial's log, what came of it), :mod:`~trialog.tools.conformance.suite`
(the suite that plays the trials, and :func:`~trialog.tools.conformance.suite.run_conformance`)
and :mod:`~trialog.tools.conformance.checks` (the checks that judge the trials' logs, and
the report). :mod:`~trialog.tools.conformance.environment` is the same for an environment
service (``--environment``): the suite plays orchestrator and actors instead. The command
line is :mod:`trialog.commands.conformance`.

What it may import: the SDK below it (the bus, the protocol, the spec, settings, trust,
the environment interface) and :mod:`trialog.tools.campaign` for the commands' settings;
never a service: the implementation under test runs as a command of its own.
"""
