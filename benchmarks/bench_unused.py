"""What the plugin costs a pytest run that collects no eval file (target: at most 30 ms).

pytest loads every installed plugin in every run of its environment, so a suite that has
nothing to do with LLM evals pays for importing and configuring pytest-llmtool. Measured on a
one-test unrelated suite, with the bytecode cache on (as on a user's machine; the warm-up
writes it): the same command with the plugin and with `-p no:llmtool`, interleaved, the
median of each. Process wall times are noisy at this scale (tens of ms), so the script also
prints what the plugin imports in such a run (`-X importtime`), which is what the cost is.

    python benchmarks/bench_unused.py [--rounds 21]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

from _harness import PASSED, PYTEST, Run, header, measure, workdir

TARGET_MS = 30.0


def imported_by_plugin(cwd: str) -> list[tuple[str, int]]:
    """The modules of ours (and anything they pull in) a plugin-on run imports, with their
    cumulative import time in microseconds, from `-X importtime`."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *PYTEST[1:], "test_one.py"],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    found = []
    for line in proc.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|(\s*)(\S+)", line)
        if match and match.group(3).startswith("pytest_llmtool") and len(match.group(2)) <= 3:
            found.append((match.group(3), int(match.group(1))))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21, help="timed rounds (default 21)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when over the target")
    args = parser.parse_args()
    # The cache on, as a user has it: this process's environment is what the runs inherit.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    header(
        "bench_unused: the plugin's cost to a run that collects no eval file",
        [
            "suite: one file, one passing test; plugin on against `-p no:llmtool`",
            f"{args.rounds} interleaved rounds after a warm-up (which writes the bytecode "
            "cache); medians reported",
        ],
    )
    with workdir(keep=False) as tmp:
        (tmp / "test_one.py").write_text("def test_one():\n    assert True\n", encoding="utf-8")
        on = Run("plugin on", ["test_one.py"], PASSED, 1)
        off = Run("plugin off", ["test_one.py", "-p", "no:llmtool"], PASSED, 1)
        times = measure([on, off], tmp, args.rounds)
        modules = imported_by_plugin(str(tmp))
    median_on = statistics.median(times[on.label])
    median_off = statistics.median(times[off.label])
    cost_ms = (median_on - median_off) * 1000
    print(f"median: on {median_on * 1000:.1f} ms, off {median_off * 1000:.1f} ms")
    spread = [(a - b) * 1000 for a, b in zip(times[on.label], times[off.label], strict=True)]
    print(f"per-round difference: min {min(spread):.1f} ms, max {max(spread):.1f} ms")
    print("imported by the plugin in this run (cumulative, top level):")
    for name, micros in modules:
        print(f"  {name:<40} {micros / 1000:7.1f} ms")
    imported_ms = sum(m for _, m in modules) / 1000
    print(f"plugin import total: {imported_ms:.1f} ms")
    ok = cost_ms <= TARGET_MS
    print(
        f"cost of the plugin: {cost_ms:.1f} ms (target <= {TARGET_MS:.0f} ms): "
        f"{'OK' if ok else 'OVER'}"
    )
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
