import random

import pytest
from ledger import Entry, Summary, parse_rows
from ledger.sample import make_text


def summary_of(amounts):
    return Summary(Entry("2024-01-01", "cash", cents, "") for cents in amounts)


def test_median_odd_even_and_unsorted_input():
    assert summary_of([5, 1, 3]).median() == 3.0
    assert summary_of([4, 1, 3, 2]).median() == 2.5
    assert summary_of([-7]).median() == -7.0
    assert isinstance(summary_of([1, 2, 3]).median(), float)


def test_median_matches_sorting_on_random_data():
    rng = random.Random(3)
    for size in [1, 2, 9, 100, 501]:
        amounts = [rng.randint(-1000, 1000) for _ in range(size)]
        ordered = sorted(amounts)
        middle = size // 2
        expected = ordered[middle] if size % 2 else (ordered[middle - 1] + ordered[middle]) / 2
        assert summary_of(amounts).median() == expected


def test_percentile_nearest_rank():
    summary = summary_of([15, 20, 35, 40, 50])
    assert [summary.percentile(p) for p in [5, 30, 40, 50, 100]] == [15, 20, 20, 35, 50]
    for bad in [0, -1, 101]:
        with pytest.raises(ValueError):
            summary.percentile(bad)


def test_empty_summary():
    empty = Summary([])
    assert len(empty) == 0 and empty.total() == 0 and empty.by_account() == {}
    for call in [empty.mean, empty.median, lambda: empty.percentile(50)]:
        with pytest.raises(ValueError):
            call()


def test_summary_does_not_mutate_or_depend_on_call_order():
    entries = parse_rows(make_text(200))
    summary = Summary(entries)
    first = (summary.percentile(90), summary.median(), summary.percentile(10))
    assert summary.entries == entries
    assert (summary.percentile(90), summary.median(), summary.percentile(10)) == first
    summary.entries.append(Entry("2024-01-01", "cash", 10**9, ""))
    assert summary.percentile(100) == 10**9


def test_totals_and_by_account():
    summary = Summary(parse_rows(make_text(200)))
    totals = summary.by_account()
    assert list(totals) == sorted(totals)
    assert sum(totals.values()) == summary.total()
    assert summary.mean() == summary.total() / 200
