"""What the plugin costs a pytest run that collects no eval file (target: at most 30 ms).

pytest loads every installed plugin in every run of its environment, so a suite that has
nothing to do with LLM evals pays for importing and configuring pytest-llmtool. Measured on a
one-test unrelated suite, with the bytecode cache on (as on a user's machine; the warm-up
writes it): the same command with the plugin and with `-p no:llmtool`, interleaved, the
median of each. Process wall times are noisy at this scale (tens of ms), so the judged figure
is the time spent in the plugin's own code (its hooks and module imports, under cProfile, the
median of 5 runs); what it imports (`-X importtime`) is printed too.

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


def plugin_time_profiled(cwd: str) -> float:
    """Seconds spent in the plugin's own code in one plugin-on run, under cProfile: the
    cumulative time of every call into `pytest_llmtool` from outside it (its hooks, the
    import of its modules), which the wall-time difference measures too but through
    noise. cProfile slows what it measures, so this is an upper bound."""
    import pstats
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".prof") as out:
        subprocess.run(
            [sys.executable, "-m", "cProfile", "-o", out.name, *PYTEST[1:], "test_one.py"],
            cwd=cwd,
            capture_output=True,
            check=True,
        )
        stats = pstats.Stats(out.name).stats  # type: ignore[attr-defined]

    def ours(func: tuple[str, int, str]) -> bool:
        return "pytest_llmtool" in func[0]

    total = 0.0
    for func, (_, _, _, cumulative, callers) in stats.items():
        if ours(func) and not any(ours(caller) for caller in callers):
            total += cumulative
    return total


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
        profiled = sorted(plugin_time_profiled(str(tmp)) for _ in range(5))
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
    print(
        f"time in the plugin's code per run (cProfile, 5 runs): median "
        f"{profiled[2] * 1000:.1f} ms, range {profiled[0] * 1000:.1f}-{profiled[-1] * 1000:.1f}"
    )
    # Judged on the profiled time: the wall-time difference of two ~1 s processes is the
    # difference of two noisy numbers (see the per-round spread), printed beside it.
    profiled_ms = profiled[2] * 1000
    ok = profiled_ms <= TARGET_MS
    print(
        f"cost of the plugin: {profiled_ms:.1f} ms of its own code (target <= {TARGET_MS:.0f} "
        f"ms): {'OK' if ok else 'OVER'}; wall-time difference of the medians {cost_ms:.1f} ms"
    )
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
