"""The operator's and developer's tools behind ``trialog`` commands.

``trialog demo`` (:mod:`~trialog.tools.demo`), ``trialog run``'s campaigns
(:mod:`~trialog.tools.campaign`), plots of returns (:mod:`~trialog.tools.plot`), the
environment contract check (:mod:`~trialog.tools.check`) and the protocol conformance
suite for actor services in any language (:mod:`~trialog.tools.conformance`).

May import every SDK package below it (controllers, the bus, the datalog, the broker …);
nothing below them imports a tool: only the command line (:mod:`trialog.commands`) and
the training loop (:mod:`trialog.learn.train` runs its campaigns and plots with them).
"""
