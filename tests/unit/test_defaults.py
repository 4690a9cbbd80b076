"""One set of defaults: the command line and the Helm chart create the same topics."""

from __future__ import annotations

from pathlib import Path

import yaml

from trialog.settings import Settings

CHART_VALUES = Path(__file__).resolve().parents[2] / "helm" / "trialog" / "values.yaml"


def test_the_chart_and_the_command_line_agree_on_partitions_and_copies():
    chart = yaml.safe_load(CHART_VALUES.read_text())["kafka"]
    defaults = Settings.load({}, environ={})
    assert chart["partitions"] == defaults.partition_count()  # a local run may create fewer: test_topic_plan.py
    # The chart runs on a cluster of three brokers or more; the command line counts them.
    assert chart["replicationFactor"] == defaults.replicas(brokers=3) == defaults.replicas(brokers=5)
    assert defaults.replicas(brokers=1) == 1
