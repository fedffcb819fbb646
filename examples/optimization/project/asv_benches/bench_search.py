"""asv benchmarks (`asv run --python=same`); the pytest-benchmark ones are under benches/."""

from ledger import find_duplicates, parse_rows
from ledger.sample import make_text

ENTRIES = parse_rows(make_text(800, seed=5))


class TimeSearch:
    # A few short samples: the example must stay fast (asv's defaults take seconds).
    warmup_time = 0.0
    repeat = (3, 6, 0.1)
    number = 1

    def time_find_duplicates(self):
        find_duplicates(ENTRIES)


def time_find_duplicates_small():
    find_duplicates(ENTRIES[:200])


time_find_duplicates_small.warmup_time = 0.0
time_find_duplicates_small.repeat = (3, 6, 0.1)
time_find_duplicates_small.number = 1
