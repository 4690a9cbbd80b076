"""The SDK's commands: one module per area of the ``trialog`` command line.

Each module (``trialog.commands.settings``, ``.topics``, ``.trial``, ``.datalog`` …) holds
the argparse wiring of its commands and the functions they run, and exposes
``add(sub) -> None``, which adds its subcommand(s) to the top-level subparsers
(``serve``'s returns the ``serve`` subparsers, which the services fill through the
``trialog.commands`` entry point). :data:`trialog.cli.COMMANDS` lists these modules in the
order ``trialog --help`` shows them; :func:`trialog.cli.build_parser` calls each one's
``add``. :mod:`~trialog.commands.parts` holds the building blocks they share (and the
services' commands use too).

The library code stays in the library modules (:mod:`trialog.tools.check`,
:mod:`trialog.learn.train`, :mod:`trialog.analytics` …): a command module imports what it
runs, where it can inside the function that runs it, so that ``trialog --help`` stays quick.
"""
