"""The teaming evaluation's arithmetic and files (trialog.tools.teaming), and the stand-in
person (trialog.tools.person) against a socket speaking the seat protocol."""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import json
import math
import statistics

import pytest
import websockets
import yaml

from trialog.errors import TrialogError
from trialog.spec import parse_spec
from trialog.tools.person import Page, load_person, play_seat, random_person, seat_socket_url
from trialog.tools.plot import TrialReturn
from trialog.tools.teaming import (
    ModeSummary,
    TeamTrial,
    check_ended,
    mode_implementations,
    parse_modes,
    summaries,
    summarize,
    t975,
    table,
    write_results,
)

SPEC = """
name: duo
actor_classes:
  cook: {observation: {type: long}, action: {type: long, trialog.space: {type: Discrete, n: 7}}, default_action: 6}
environments:
  kitchen: {entry: "trialog.examples.rps.game:RockPaperScissors"}
actors:
  planner: {entry: "trialog.agents.random_agent:RandomAgent", classes: [cook]}
  human: {client: true, classes: [cook]}
trial:
  environment: kitchen
  actors:
    - {name: a, class: cook, implementation: human}
    - {name: b, class: cook, implementation: planner}
    - {name: c, class: cook, implementation: planner}
"""


def test_the_mean_and_its_95_percent_interval_by_students_t():
    values = [1.0, 2.0, 3.0, 4.0]
    row = summarize("ai", values)
    half = 3.182 * statistics.stdev(values) / math.sqrt(4)  # t(0.975, 3 df) = 3.182
    assert (row.label, row.trials, row.mean, row.min, row.max) == ("AI-only", 4, 2.5, 1.0, 4.0)
    assert row.ci_low == pytest.approx(2.5 - half) and row.ci_high == pytest.approx(2.5 + half)
    assert row.ci_low == pytest.approx(0.4457, abs=1e-3)  # scipy.stats.t.interval(0.95, 3, 2.5, sem)


def test_equal_returns_have_a_zero_width_interval_and_one_trial_none():
    same = summarize("human", [5.0, 5.0, 5.0])
    assert (same.mean, same.ci_low, same.ci_high) == (5.0, 5.0, 5.0)
    one = summarize("mixed", [7.0])
    assert one.label == "human+AI" and one.mean == 7.0 and math.isnan(one.ci_low) and math.isnan(one.ci_high)
    none = summarize("ai", [])
    assert none.trials == 0 and math.isnan(none.mean)


def test_t_quantiles_shrink_towards_the_normals():
    assert t975(1) == 12.706 and t975(9) == 2.262 and t975(30) == 2.042
    assert t975(45) == 2.021  # past 30: the tabulated degrees of freedom below, a slightly wider interval
    assert t975(1000) == 1.96
    assert all(t975(d) >= t975(d + 1) for d in range(1, 200))
    with pytest.raises(ValueError):
        t975(0)


def test_the_table_has_a_row_per_mode_in_order():
    rows = [summarize("ai", [10.0, 12.0]), summarize("human", [0.0]), summarize("mixed", [4.0, 6.0, 8.0])]
    lines = table(rows).splitlines()
    assert lines[0].split() == ["mode", "trials", "mean", "return", "95%", "CI", "min", "max"]
    assert lines[1].split()[:3] == ["AI-only", "2", "11.00"]
    assert lines[2].split() == ["human-only", "1", "0.00", "—", "0.00", "0.00"]  # no interval from one trial
    low, high = rows[2].ci_low, rows[2].ci_high
    assert lines[3].split() == ["human+AI", "3", "6.00", f"[{low:.2f},", f"{high:.2f}]", "4.00", "8.00"]


def test_modes_fill_the_seats_with_the_agent_and_the_person():
    spec = parse_spec(yaml.safe_load(SPEC))
    assert mode_implementations(spec, "ai", "planner", "human") == {"a": "planner", "b": "planner", "c": "planner"}
    assert mode_implementations(spec, "human", "planner", "human") == {"a": "human", "b": "human", "c": "human"}
    assert mode_implementations(spec, "mixed", "planner", "human") == {"a": "human", "b": "planner", "c": "planner"}
    assert spec.seats(mode_implementations(spec, "mixed", "planner", "human")) == ["a"]
    with pytest.raises(TrialogError, match="client implementation"):
        mode_implementations(spec, "ai", "planner", "planner")
    with pytest.raises(TrialogError, match="not client"):
        mode_implementations(spec, "ai", "human", "human")
    with pytest.raises(TrialogError, match="not an implementation"):
        mode_implementations(spec, "ai", "nobody", "human")
    assert parse_modes("mixed, ai,mixed") == ["mixed", "ai"]
    with pytest.raises(TrialogError, match="--modes"):
        parse_modes("ai,robots")


def _trial(mode: str, index: int, total: float) -> TeamTrial:
    returns = {"a": total / 2, "b": total / 2}
    result = TrialReturn(f"t-{mode}-{index}", "x + y", returns, samples=40)
    return TeamTrial(mode, index, f"t-{mode}-{index}", {"a": "x", "b": "y"}, "max_ticks", 20, {"a": 20}, result)


def test_results_are_written_as_a_plot_a_csv_and_a_json(tmp_path):
    trials = [_trial("ai", 1, 18.0), _trial("ai", 2, 20.0), _trial("human", 1, 0.0), _trial("mixed", 1, 6.0)]
    rows = summaries(trials, ["ai", "human", "mixed"])
    assert [(r.mode, r.trials, r.mean) for r in rows] == [("ai", 2, 19.0), ("human", 1, 0.0), ("mixed", 1, 6.0)]
    assert [r.mean for r in summaries(trials, ["ai"], actor="a")] == [9.5]
    files = write_results(trials, rows, tmp_path / "out", spec="duo")
    assert files.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(files.csv) as f:
        read = list(csv.DictReader(f))
    assert [(r["mode"], r["trial"], float(r["return"])) for r in read] == [
        ("ai", "1", 18.0), ("ai", "2", 20.0), ("human", "1", 0.0), ("mixed", "1", 6.0),
    ]  # fmt: skip
    doc = json.loads(files.json.read_text())
    assert [s["mode"] for s in doc["summary"]] == ["ai", "human", "mixed"]
    assert doc["summary"][1]["ci_low"] is None  # one trial: no interval (NaN is not JSON)
    assert doc["trials"][0]["returns"] == {"a": 9.0, "b": 9.0}
    assert ModeSummary(**doc["summary"][0]) == rows[0]


def test_a_trial_that_did_not_end_as_a_trial_should_is_left_out_and_named():
    nobody_came = dataclasses.replace(_trial("human", 2, 0.0), reason="join_timeout")
    never_indexed = dataclasses.replace(_trial("human", 3, 0.0), result=None)
    trials = [_trial("human", 1, 4.0), nobody_came, never_indexed]
    assert [(r.trials, r.mean) for r in summaries(trials, ["human"])] == [(1, 4.0)]
    assert check_ended(trials) == [
        "t-human-2 (human-only 2): join_timeout", "t-human-3 (human-only 3): no return in the log",
    ]  # fmt: skip


WELCOME = {
    "type": "welcome", "actor": "a", "holder": "h",
    "actors": [{"name": "a", "class": "cook", "implementation": "human", "client": True}],
    "classes": {"cook": {"action_schema": json.dumps({"type": "long", "trialog.space": {"type": "Discrete", "n": 7}}),
                         "default_action": 6}},
}  # fmt: skip


def test_the_random_person_picks_valid_actions_from_the_welcomes_schema():
    page = Page(WELCOME, {"tick": 0, "final": False, "observation": None})
    assert {random_person(page) for _ in range(200)} == set(range(7))
    enum = {**WELCOME, "classes": {"cook": {"action_schema": {"type": "enum", "name": "M", "symbols": ["R", "P"]}}}}
    assert random_person(Page(enum, {"tick": 3, "observation": None})) in ("R", "P")
    masked = Page(WELCOME, {"tick": 0, "observation": {"action_mask": [0, 0, 1, 0, 0, 0, 0]}})
    assert {random_person(masked) for _ in range(20)} == {2}


def test_scripted_people_are_named_module_function():
    assert load_person("trialog.tools.person:random_person") is random_person
    for bad in ("trialog.tools.person", "trialog.tools.person:nobody", "no_such_module:f"):
        with pytest.raises(TrialogError):
            load_person(bad)
    assert seat_socket_url("http://h:8000/play?token=T", "me") == "ws://h:8000/ws/seat?token=T&holder=me"
    assert seat_socket_url("https://h/play?token=T", "me") == "wss://h/ws/seat?token=T&holder=me"


@pytest.mark.parametrize("kind", ["function", "coroutine function"])
def test_a_stand_in_answers_each_waiting_observation_on_the_seat_socket(kind):
    """A socket speaking the gateway's seat protocol: welcome, a view (observations are null
    when the trial has views), observations; the stand-in answers the waiting tick only."""
    got: list[dict] = []
    seen: list[tuple] = []

    async def gateway(ws):
        seen.append((ws.request.path,))
        await ws.send(json.dumps(WELCOME))
        for tick in range(3):
            await ws.send(json.dumps({"type": "view", "tick": tick, "view": {"kind": "k", "t": tick}}))
            await ws.send(json.dumps({"type": "observation", "tick": tick, "actor": "a", "final": False,
                                      "observation": None}))  # fmt: skip
            got.append(json.loads(await ws.recv()))
        await ws.send(json.dumps({"type": "observation", "tick": 3, "actor": "a", "final": True, "observation": None}))
        await ws.send(json.dumps({"type": "end", "tick": 3, "reason": "max_ticks", "details": None}))

    def decide(page: Page):
        assert page.view == {"kind": "k", "t": page.tick}
        return page.tick + 1

    async def slow(page: Page):
        await asyncio.sleep(0.01)
        return decide(page)

    person = decide if kind == "function" else slow

    async def go():
        async with websockets.serve(gateway, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            return await play_seat(f"http://127.0.0.1:{port}/play?token=T0", person, holder="stand-in", timeout=10)

    result = asyncio.run(go())
    assert seen == [("/ws/seat?token=T0&holder=stand-in",)]
    assert got == [{"type": "action", "tick": t, "action": t + 1} for t in range(3)]
    assert (result.actor, result.actions, result.end["reason"]) == ("a", 3, "max_ticks")


def test_a_refused_seat_fails_loudly():
    async def gateway(ws):
        await ws.send(json.dumps({"type": "refused", "reason": "not issued by this deployment", "held": False}))
        await ws.close(4403, "refused")

    async def go():
        async with websockets.serve(gateway, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            await play_seat(f"http://127.0.0.1:{port}/play?token=bad", random_person, holder="h", timeout=10)

    with pytest.raises(TrialogError, match="refused: not issued"):
        asyncio.run(go())
