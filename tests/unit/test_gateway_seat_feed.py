"""What a seat's feed leaves out before queueing, checking or decoding (``_others``): only
records the seat would neither fold nor show — another actor's observations and actions, and
rewards that cannot reach the seat's actor whatever its class and that it did not send."""

from __future__ import annotations

import itertools

from trialog.bus.base import Record
from trialog.protocol.events import HEADER_KIND, HEADER_RECEIVER, HEADER_SENDER
from trialog.protocol.trial import reaches
from trialog.services.gateway.sockets import _others

ME = "bob"


def record(kind: str, sender: str | None = None, receiver: str | None = None) -> Record:
    headers = [(HEADER_KIND, kind.encode())]
    headers += [(HEADER_SENDER, sender.encode())] if sender is not None else []
    headers += [(HEADER_RECEIVER, receiver.encode())] if receiver is not None else []
    return Record("events", 0, 0, b"t", b"", tuple(headers), 0)


def test_a_seat_skips_only_rewards_it_neither_sends_nor_can_be_reached_by():
    receivers = [ME, "alice", "*", "player.*", "cook.*", "env"]
    senders = ["env", "env/speed", "alice", ME, "person:judge-0"]
    skipped = 0
    for receiver, sender in itertools.product(receivers, senders):
        skip = _others(record("reward", sender, receiver), ME)
        reachable = any(reaches(receiver, sender, ME, cls) for cls in ("player", "cook"))
        if skip:
            assert not reachable and sender != ME, (receiver, sender)  # neither shown nor folded
            skipped += 1
        else:  # kept: it reaches the seat, or the seat sent it, or the receiver names a class
            assert reachable or sender == ME or receiver.endswith(".*") or receiver == "*", (receiver, sender)
    assert skipped == 8  # to alice or env, from anyone but the seat: what a tick of two actors is made of
    assert not _others(record("reward", "env"), ME)  # no receiver header: decoded, judged on its body


def test_a_seat_skips_the_other_actors_observations_and_actions_only():
    assert _others(record("observation", "env", "alice"), ME)
    assert not _others(record("observation", "env", ME), ME)
    assert _others(record("action", "alice"), ME)
    assert not _others(record("action", ME), ME)
    for kind in ("trial.started", "trial.ended", "view", "message", "actor.joined"):
        assert not _others(record(kind, "alice", "alice"), ME), kind
