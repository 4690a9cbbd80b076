"""The datalog: samples folded from a trial's log, replay, the Parquet archive and exports (see ``docs/datalog.md``)."""
