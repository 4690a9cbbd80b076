"""Trialog's services, one folder each (installed as ``trialog.services.<name>``):
orchestrator, environment, actors, logger, gateway, learner, analytics.

Each has one shape (docs/design.md, "How to add a service"): ``cli.py`` adds its
``trialog serve`` command, ``main.py`` (``app.py`` for the web apps) runs the process,
``handler.py`` is what it does with each record. A service may import any of the SDK,
never another service: what two services share belongs in ``trialog/``.
"""
