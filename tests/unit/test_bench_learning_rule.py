"""The learning benchmark's curve rule (bench/learning.py): a curve through the log passes
when it leaves the other runs' spread no more often than some in-process seed's curve does."""

from __future__ import annotations

from bench.learning import like_the_seeds, outside_counts


def curve(*returns: float) -> list[tuple[int, float]]:
    return [(5_000 * (i + 1), r) for i, r in enumerate(returns)]


SEEDS = {
    "1": curve(200, 450, 500, 500),
    "2": curve(300, 400, 480, 500),
    "3": curve(250, 500, 500, 470),
    "4": curve(150, 480, 500, 500),
}


def test_each_run_is_counted_against_the_spread_of_the_others():
    counts = outside_counts({"trialog": curve(220, 420, 490, 500), **SEEDS})
    # Seed 2: 300 above the others' 150–250, 400 below their 420–500, 480 below their 490–500.
    # Seed 3: 500 above the others' 400–480, 470 below their 500. Seed 4: 150 below 200–300.
    assert counts == {"trialog": 0, "1": 0, "2": 3, "3": 2, "4": 1}


def test_a_curve_like_the_seeds_passes_where_every_evaluation_within_their_spread_would_not():
    runs = {"trialog": curve(350, 450, 500, 500), **SEEDS}  # 350: above every seed's first evaluation
    counts = outside_counts(runs)
    assert counts["trialog"] == 1
    assert like_the_seeds(counts["trialog"], [counts[s] for s in SEEDS])


def test_a_curve_that_learns_later_than_every_seed_fails():
    runs = {"trialog": curve(20, 90, 300, 500), **SEEDS}
    counts = outside_counts(runs)
    assert counts["trialog"] == 3
    assert max(counts[s] for s in SEEDS) < 3
    assert not like_the_seeds(counts["trialog"], [counts[s] for s in SEEDS])


def test_a_curve_outside_where_no_seed_ever_is_fails():
    seeds = {s: curve(500, 500, 500) for s in "123"}
    counts = outside_counts({"trialog": curve(500, 499, 500), **seeds})
    assert counts == {"trialog": 1, "1": 0, "2": 0, "3": 0}
    assert not like_the_seeds(counts["trialog"], [0, 0, 0])


def test_evaluations_only_some_runs_have_are_counted_against_those_that_have_them():
    counts = outside_counts({"a": curve(100, 300), "b": curve(150), "c": curve(120, 300, 50)})
    # a's second evaluation is held against c's alone; c's third has no other run's to lie outside of.
    assert counts == {"a": 1, "b": 1, "c": 0}


def test_no_seeds_is_no_pass():
    assert not like_the_seeds(0, [])
