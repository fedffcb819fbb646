from ledger import find_duplicates, parse_rows
from ledger.sample import make_text

ENTRIES = parse_rows(make_text(800, seed=5))


def test_find_duplicates(benchmark):
    assert benchmark(find_duplicates, ENTRIES)
