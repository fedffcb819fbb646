"""Per-item cost of running dataset tasks, against pytest's own per-item cost.

Ours: a generated JSONL dataset of N bash tasks run under `--llm-model=nop` (the agent makes
no tool call, so every task's only check, `exit_code:-1`, passes): each item still goes
through collection, validation, the agent loop, a fresh bashkit sandbox, scoring, result
reporting and the end-of-session summary. Baseline: a test function parametrized over
range(N) that asserts `i >= 0`. Both also run with N=1 to measure start-up, and the judged
number is the per-item ratio (target: ours <= 1.5x pytest's own), the ratio of the medians;
the range of the per-round ratios says how noisy the machine was.

    python benchmarks/bench_items.py [--n 2000] [--rounds 5] [--strict] [--keep]
"""

from __future__ import annotations

import math
import sys

from _harness import (
    PASSED,
    Comparison,
    Run,
    compare,
    header,
    measure,
    nop_dataset,
    parametrized_test_file,
    parse_args,
    print_comparison,
    verdict,
    workdir,
)

DESCRIPTION = "Per-item run cost: pytest-llmtool (nop agent) vs a parametrized pytest test."
DEFAULT_N = 2000
# A round (4 pytest runs) takes ~15 s on 2 cores; the per-item signal is small, so use 5.
DEFAULT_ROUNDS = 5
TARGET_PER_ITEM = 1.5


def main() -> int:
    args = parse_args(DESCRIPTION, DEFAULT_N, DEFAULT_ROUNDS)
    n: int = args.n
    header(
        "bench_items: per-item cost of a run, pytest-llmtool vs plain pytest",
        [
            f"ours:     {n} JSONL bash tasks, --llm-model=nop (every task passes exit_code:-1)",
            f"baseline: @pytest.mark.parametrize('i', range({n})) with `assert i >= 0`",
            "start-up: the same commands on a 1-item dataset / 1-case test file",
            f"{args.rounds} interleaved rounds after a warm-up of the N=1 runs; medians reported",
        ],
    )
    with workdir(args.keep) as tmp:
        parametrized_test_file(tmp / "test_base_n.py", n)
        parametrized_test_file(tmp / "test_base_1.py", 1)
        nop_dataset(tmp / "tasks_n.jsonl", n)
        nop_dataset(tmp / "tasks_1.jsonl", 1)
        nop = "--llm-model=nop"
        base_n = Run(f"baseline N={n}", ["test_base_n.py"], PASSED, n)
        ours_n = Run(f"ours N={n}", ["tasks_n.jsonl", nop], PASSED, n)
        base_1 = Run("baseline N=1", ["test_base_1.py"], PASSED, 1)
        ours_1 = Run("ours N=1", ["tasks_1.jsonl", nop], PASSED, 1)
        runs = [base_1, ours_1, base_n, ours_n]
        times = measure(runs, tmp, args.rounds, warm=[base_1, ours_1])

    result = compare(times, n, base=(base_n, base_1), ours=(ours_n, ours_1))
    print_comparison(result, "run")
    # Each round's own ratio, by the same rule as the judged one (NaN where noise swamped it).
    rounds = [
        Comparison(n, b, o, b1, o1).per_item_ratio
        for b, b1, o, o1 in zip(
            times[base_n.label],
            times[base_1.label],
            times[ours_n.label],
            times[ours_1.label],
            strict=True,
        )
    ]
    valid = [r for r in rounds if not math.isnan(r)]
    span = f"{min(valid):.2f}x-{max(valid):.2f}x" if valid else "n/a"
    swamped = len(rounds) - len(valid)
    print(f"per-item ratio, round by round: {span}" + (f" ({swamped} swamped)" if swamped else ""))
    print(f"whole run:  ours/baseline = {result.whole_ratio:.2f}x (informational)")
    ok = verdict("per-item run cost", result.per_item_ratio, TARGET_PER_ITEM)
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
