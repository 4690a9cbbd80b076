"""On a real broker: a decide-style agent's rewards and messages are in the log and
folded as expected, and an agent whose constructor raises ends its trial at once with the
reason (the scenarios of tests/unit/test_agent_outputs.py)."""

from __future__ import annotations

import pytest

from tests.unit.test_agent_outputs import ends_at_once, load, play_judged_trial
from trialog.bus.kafka import KafkaBus

pytestmark = pytest.mark.integration


async def test_a_decide_style_agent_rewards_and_messages_on_kafka(kafka_settings, tmp_path):
    bus = KafkaBus(kafka_settings)
    await play_judged_trial(bus, load(bus, tmp_path))


async def test_an_agent_whose_constructor_raises_ends_its_trial_at_once_on_kafka(kafka_settings, tmp_path):
    bus = KafkaBus(kafka_settings)
    ended = await ends_at_once(
        bus, load(bus, tmp_path), {"alice": "broken"}, "actor alice could not start: RuntimeError: no weights"
    )
    assert ended.tick == 0
