"""How many partitions the topics Trialog creates get (no broker)."""

from __future__ import annotations

import pytest

from trialog.errors import SettingsError
from trialog.protocol.topics import plan
from trialog.settings import DEFAULT_PARTITIONS, Settings


def counts(settings: Settings, instances: int | None = None) -> set[int]:
    return {t.partitions for t in plan(settings, 1, instances) if t.role in ("control", "events")}


def test_partitions_are_the_settings_else_one_per_local_instance_else_the_chart_default():
    open_count = Settings.load({}, environ={})
    assert open_count.partitions == 0
    assert counts(open_count) == {DEFAULT_PARTITIONS} == {12}  # `trialog topics create`, the services
    assert counts(open_count, 1) == {1} and counts(open_count, 3) == {3}  # a local run's instances
    given = Settings.load({}, environ={"TRIALOG_PARTITIONS": "6"})
    assert counts(given) == counts(given, 1) == {6}  # what the operator chose wins


def test_a_negative_partition_count_is_refused():
    with pytest.raises(SettingsError, match="partitions"):
        Settings.load({"partitions": -1}, environ={})
