"""Print deterministic outputs of ledger's public functions (compared before and after a change)."""

import hashlib

from ledger import Summary, find_duplicates, parse_rows
from ledger.sample import make_text


def digest(value) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]


for rows, seed in [(0, 1), (1, 2), (57, 3), (2000, 4)]:
    entries = parse_rows(make_text(rows, seed=seed))
    print(f"parse_rows({rows}, seed={seed}): {len(entries)} rows, sha {digest(entries)}")
    if entries:
        summary = Summary(entries)
        print(f"  total={summary.total()} mean={summary.mean()!r} median={summary.median()!r}")
        print(f"  percentiles={[summary.percentile(p) for p in (1, 10, 50, 90, 99.5, 100)]}")
        print(f"  by_account={summary.by_account()}")
    pairs = find_duplicates(entries)
    print(f"  duplicates: {len(pairs)} pairs, first {pairs[:3]}, sha {digest(pairs)}")

for bad in [
    "x\n",
    "date,account,amount,memo\n2024-01-01,cash\n",
    "date,account,amount,memo\nd,a,1.001,\n",
]:
    try:
        parse_rows(bad)
    except ValueError as error:
        print(f"error: {error}")
