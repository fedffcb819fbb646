"""Controller memory and time of very large runs: N `nop` bash tasks, plain and under xdist.

For each N the same generated dataset runs twice in a fresh pytest process: once plainly
(one process collects, runs and reports) and once with `-n 2` (the controller only reports).
The script prints the wall time and the peak resident memory of the reporting process
(`ru_maxrss` of the process that ran `pytest.main`, so xdist workers are not counted in the
`-n 2` figure), and the same figures per task. The baseline, measured in the same run, is a
plain pytest test parametrized over range(N): what pytest itself costs for N items.

Targets: a plain run within 1.5x of pytest alone in both time and peak memory; at most
1 GB of controller memory at 100k tasks (the `-n 2` figure); time linear in N. The plain run
and pytest alone take turns for `--rounds` rounds (the machine's load drifts over a minute);
the judged ratio is the median of the rounds' own ratios, with their range.

    python benchmarks/bench_scale.py [--n 20000 100000] [--rounds 3] [--no-xdist | --xdist-only]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import nop_dataset, parametrized_test_file

PLAIN_TARGET = 1.5
PROBE = """
import resource, sys, pytest
rc = pytest.main(sys.argv[1:])
print("PEAK_RSS_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, flush=True)
sys.exit(int(rc))
"""


def run(cwd: Path, args: list[str], n: int) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of the reporting process; checks all N passed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    passed = re.search(r"^(\d+) passed", proc.stdout, re.MULTILINE)
    rss = re.search(r"^PEAK_RSS_KB (\d+)", proc.stdout, re.MULTILINE)
    if proc.returncode != 0 or passed is None or int(passed.group(1)) != n or rss is None:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
        raise SystemExit(f"run {args} did not pass {n} items (exit {proc.returncode}):\n{tail}")
    return elapsed, int(rss.group(1)) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--no-xdist", action="store_true", help="only the plain run")
    parser.add_argument("--xdist-only", action="store_true", help="only the -n 2 run")
    parser.add_argument("--rounds", type=int, default=3, help="turns of each run (default 3)")
    args = parser.parse_args()
    print("=" * 78)
    print("bench_scale: peak memory of the reporting process and wall time, N nop tasks")
    print(f"  python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print("=" * 78, flush=True)
    rows: list[tuple[str, int, float, float]] = []
    for n in args.n:
        with tempfile.TemporaryDirectory(prefix="llmtool-scale-") as tmp:
            cwd = Path(tmp)
            (cwd / "pytest.ini").write_text("", encoding="utf-8")
            (cwd / "data").mkdir()
            nop_dataset(cwd / "data" / "tasks.jsonl", n)
            parametrized_test_file(cwd / "test_base.py", n)
            report = ["--llm-report", str(cwd / "out")]
            variants = []
            if not args.xdist_only:
                variants.append(("pytest baseline", ["test_base.py"]))
                variants.append(("ours, plain", ["--llm-model=nop", *report, "data"]))
            if not args.no_xdist:
                variants.append(("ours, -n 2", ["--llm-model=nop", "-n", "2", *report, "data"]))
            for round_ in range(args.rounds):
                for label, argv in variants:
                    seconds, mb = run(cwd, argv, n)
                    rows.append((label, n, seconds, mb))
                    size = (
                        (cwd / "out" / "report.json").stat().st_size / 2**20
                        if "ours" in label
                        else 0
                    )
                    extra = f"  report.json {size:.1f} MB" if size else ""
                    print(
                        f"  N={n:>7}  r{round_ + 1} {label:<16} {seconds:8.1f} s  {mb:8.0f} MB "
                        f"peak  {1000 * seconds / n:6.2f} ms/task  {1024 * mb / n:6.2f} KB/task"
                        f"{extra}",
                        flush=True,
                    )
    print("-" * 78)
    for label in dict.fromkeys(r[0] for r in rows):
        first = [r for r in rows if r[0] == label and r[1] == rows[0][1]]
        last = [r for r in rows if r[0] == label and r[1] == rows[-1][1]]
        if first and last and last[0][1] > first[0][1]:
            n0, n1 = first[0][1], last[0][1]
            t0, t1 = statistics.median(r[2] for r in first), statistics.median(r[2] for r in last)
            m0, m1 = max(r[3] for r in first), max(r[3] for r in last)
            print(
                f"  {label:<16} N x{n1 / n0:.1f}: time x{t1 / t0:.2f}, peak memory x{m1 / m0:.2f}"
            )
    for n in dict.fromkeys(r[1] for r in rows):
        base = [r for r in rows if r[1] == n and r[0] == "pytest baseline"]
        ours = [r for r in rows if r[1] == n and r[0] == "ours, plain"]
        if base and ours:
            times = [o[2] / b[2] for b, o in zip(base, ours, strict=True)]
            time_ratio = statistics.median(times)
            memory_ratio = max(r[3] for r in ours) / max(r[3] for r in base)
            met = "met" if max(time_ratio, memory_ratio) <= PLAIN_TARGET else "MISSED"
            print(
                f"  N={n}: plain run against pytest alone: time {time_ratio:.2f}x (median of "
                f"{len(times)} rounds: {min(times):.2f}x-{max(times):.2f}x), peak memory "
                f"{memory_ratio:.2f}x (target <= {PLAIN_TARGET}x in both: {met})"
            )
    # The target is the controller's: a plain run's one process also holds every collected
    # item, as pytest always does (compare the baseline's plain figure).
    worst = max((r[3] for r in rows if r[0] == "ours, -n 2" and r[1] >= 100_000), default=None)
    if worst is not None:
        print(
            f"  target: <= 1024 MB at 100k tasks: {'met' if worst <= 1024 else 'MISSED'} "
            f"({worst:.0f} MB)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
