"""Collection cost of a large dataset, against collecting as many parametrized cases.

Ours: a generated JSONL dataset of N tasks (2-3 expectations each, of every check type,
some weighted, about two thirds with a `solution` and some with seeded `files`), collected
with `pytest --collect-only -q` under the default `oracle` model (so the tasks without a
solution also get their skip marker at collection). Baseline: a test function parametrized
over range(N), collected the same way. Both also run with N=1 to measure start-up. The
judged number is the whole-run ratio (target: ours <= 2x); the per-item ratio, start-up
subtracted, is printed too.

    python benchmarks/bench_collect.py [--n 50000] [--rounds 3] [--strict] [--keep]
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _harness import (
    COLLECTED,
    Run,
    compare,
    fmt_ratio,
    header,
    measure,
    parametrized_test_file,
    parse_args,
    print_comparison,
    verdict,
    workdir,
)

DESCRIPTION = "Collection cost: pytest-llmtool dataset vs a parametrized pytest test."
DEFAULT_N = 50_000
TARGET_WHOLE = 2.0
CATEGORIES = 10

# One builder per check type; the index makes many arguments (and regexes) distinct per task.
CHECKS: list[Callable[[int], str]] = [
    lambda i: "exit_code:0",
    lambda i: f"stdout_contains:t{i}",
    lambda i: rf"stdout_regex:^t{i}\s+(ok|done)$",
    lambda i: "stderr_empty",
    lambda i: f"file_exists:/out/r{i}.txt",
    lambda i: "dir_exists:/out",
    lambda i: f"file_contains:/data/in.txt:line {i}",
    lambda i: "file_not_contains:/data/in.txt:ERROR",
    lambda i: r"file_line_regex:/data/in.txt:^line \d+$",
    lambda i: f"file_equals:/out/r{i}.txt:done {i}",
    lambda i: "symlink:/out/link:/data/in.txt",
    lambda i: "tool_calls_min:1",
    lambda i: "tool_calls_max:5",
    lambda i: "llm_judge:the answer explains the result",
]


def make_task(i: int) -> dict[str, Any]:
    count = 2 + i % 2
    expectations: list[dict[str, Any]] = []
    for k in range(count):
        expectation: dict[str, Any] = {"check": CHECKS[(i * 3 + k * 5) % len(CHECKS)](i)}
        if (i + k) % 4 == 0:
            expectation["weight"] = 0.5
        expectations.append(expectation)
    task: dict[str, Any] = {
        "id": f"task_{i:05d}",
        "category": f"cat{i % CATEGORIES}",
        "description": f"generated task {i}",
        "prompt": f"Write 'done {i}' to /out/r{i}.txt and print t{i} ok.",
        "files": {"/data/in.txt": f"line {i}\nline {i + 1}\n"} if i % 4 == 0 else {},
        "expectations": expectations,
    }
    if i % 3 == 1:
        task["solution"] = f"mkdir -p /out && echo 'done {i}' > /out/r{i}.txt && echo t{i} ok"
    elif i % 3 == 2:
        task["solution"] = ["mkdir -p /out", f"echo 'done {i}' > /out/r{i}.txt", f"echo t{i} ok"]
    return task


def write_dataset(path: Path, n: int) -> None:
    with path.open("w", encoding="utf-8") as stream:
        for i in range(n):
            stream.write(json.dumps(make_task(i)) + "\n")


def main() -> int:
    args = parse_args(DESCRIPTION, DEFAULT_N)
    n: int = args.n
    header(
        "bench_collect: collection cost, pytest-llmtool vs plain pytest (--collect-only -q)",
        [
            f"ours:     a {n}-line JSONL dataset, default model (oracle)",
            "          2-3 checks per task of every type, some weighted, 2/3 with a solution",
            f"baseline: @pytest.mark.parametrize('i', range({n})) in one test file",
            "start-up: the same commands on a 1-line dataset / 1-case test file",
            f"{args.rounds} interleaved rounds after a warm-up of the N=1 runs; medians reported",
        ],
    )
    with workdir(args.keep) as tmp:
        parametrized_test_file(tmp / "test_base_n.py", n)
        parametrized_test_file(tmp / "test_base_1.py", 1)
        write_dataset(tmp / "tasks_n.jsonl", n)
        write_dataset(tmp / "tasks_1.jsonl", 1)
        collect = "--collect-only"
        base_n = Run(f"baseline N={n}", ["test_base_n.py", collect], COLLECTED, n)
        ours_n = Run(f"ours N={n}", ["tasks_n.jsonl", collect], COLLECTED, n)
        base_1 = Run("baseline N=1", ["test_base_1.py", collect], COLLECTED, 1)
        ours_1 = Run("ours N=1", ["tasks_1.jsonl", collect], COLLECTED, 1)
        runs = [base_1, ours_1, base_n, ours_n]
        times = measure(runs, tmp, args.rounds, warm=[base_1, ours_1])

    result = compare(times, n, base=(base_n, base_1), ours=(ours_n, ours_1))
    print_comparison(result, "collect")
    per_item = result.per_item_ratio
    if math.isnan(per_item):
        standing = "inconclusive: start-up noise exceeds the per-item signal"
    else:
        standing = f"{'within' if per_item <= TARGET_WHOLE else 'over'} {TARGET_WHOLE:g}x"
    print(
        f"per item:   ours/baseline = {fmt_ratio(per_item)} "
        f"(informational, start-up subtracted; {standing})"
    )
    ok = verdict("whole collection", result.whole_ratio, TARGET_WHOLE)
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
