from ledger import Summary, parse_rows
from ledger.sample import make_text

ENTRIES = parse_rows(make_text(1000, seed=11))


class TestSummary:
    def test_median(self, benchmark):
        benchmark(lambda: Summary(ENTRIES).median())

    def test_percentile(self, benchmark):
        benchmark(lambda: Summary(ENTRIES).percentile(90))

    def test_by_account(self, benchmark):
        benchmark(lambda: Summary(ENTRIES).by_account())
