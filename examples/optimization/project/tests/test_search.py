from ledger import Entry, find_duplicates, parse_rows
from ledger.sample import make_text


def test_pairs_ignore_memo_and_are_ordered():
    e = [
        Entry("d1", "cash", 1, "a"),
        Entry("d1", "bank", 1, ""),
        Entry("d1", "cash", 1, "b"),
        Entry("d2", "cash", 1, ""),
        Entry("d1", "cash", 1, "c"),
        Entry("d1", "bank", 1, "z"),
    ]
    assert find_duplicates(e) == [(0, 2), (0, 4), (1, 5), (2, 4)]


def test_no_duplicates():
    assert find_duplicates([]) == []
    assert find_duplicates([Entry("d", "a", n, "") for n in range(50)]) == []


def test_sample_duplicates_match_brute_force():
    rows = parse_rows(make_text(400))
    key = [(r.date, r.account, r.cents) for r in rows]
    expected = [
        (i, j) for i in range(len(rows)) for j in range(i + 1, len(rows)) if key[i] == key[j]
    ]
    assert expected and find_duplicates(rows) == expected
