"""The datalog: samples folded from a trial's log, replay, the Parquet archive and exports
(see ``docs/datalog.md``), and dead letters shown to people.

May import the protocol, trust, the bus, the controller and the spec; never the
runtimes, the tools or a service. pyarrow (the ``datalog`` extra) only where it writes.
"""
