from ledger import parse_rows
from ledger.sample import make_text

TEXT = make_text(6000)


def test_parse_rows(benchmark):
    rows = benchmark(parse_rows, TEXT)
    assert len(rows) == 6000
