"""The operator's and developer's tools behind ``trialog`` commands.

``trialog demo`` (:mod:`~trialog.tools.demo`), ``trialog run``'s campaigns
(:mod:`~trialog.tools.campaign`), plots of returns (:mod:`~trialog.tools.plot`), the
environment contract check (:mod:`~trialog.tools.check`) and the protocol conformance
suite for actor services in any language (:mod:`~trialog.tools.conformance`).

May import every SDK package below it (controllers, the bus, the datalog, the broker …);
nothing in the SDK imports a tool except the command line (:mod:`trialog.commands`).
"""
