"""Shared machinery of the benchmark scripts (not a test module, not a benchmark itself).

Every measurement is the wall time of a whole `python -m pytest` subprocess, run in a fresh
temporary directory that holds an empty `pytest.ini` (so no project configuration applies).
Baseline and ours are interleaved and repeated; the median of each is reported. The fixed
start-up cost of a pytest process is measured with a 1-item variant of the same command, so
that the per-item cost `(time(N) - time(1)) / (N - 1)` can be compared apart from start-up.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
# Environment variables that would let the caller's setup change what pytest does.
_SCRUBBED_ENV = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")


@dataclass(frozen=True)
class Run:
    """One pytest command and how to tell that it did what the benchmark meant it to do."""

    label: str
    args: list[str]
    expect: re.Pattern[str]  # must match the output, with group 1 the item count
    count: int

    def check(self, returncode: int, output: str) -> None:
        match = self.expect.search(output)
        if returncode != 0 or match is None or int(match.group(1)) != self.count:
            tail = "\n".join(output.splitlines()[-25:])
            raise SystemExit(
                f"benchmark run {self.label!r} did not do what was expected "
                f"(exit {returncode}, wanted {self.count} items matching "
                f"{self.expect.pattern!r}):\n{tail}"
            )


PASSED = re.compile(r"^(\d+) passed(?:, \d+ warnings?)? in [\d.]+s", re.MULTILINE)
COLLECTED = re.compile(r"^(\d+) tests? collected(?:, \d+ warnings?)? in [\d.]+s", re.MULTILINE)


def parse_args(description: str, default_n: int, default_rounds: int = 3) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--n", type=int, default=default_n, help=f"items (default {default_n})")
    parser.add_argument(
        "--rounds",
        type=int,
        default=default_rounds,
        help=f"timed rounds, each runs every command once (default {default_rounds})",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when the judged ratio misses the target"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary directory and print its path"
    )
    args = parser.parse_args()
    if args.n < 2:
        parser.error("--n must be at least 2 (the 1-item variant is the start-up reference)")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


@contextmanager
def workdir(keep: bool) -> Iterator[Path]:
    """A fresh directory with an empty pytest.ini, removed afterwards unless `keep`."""
    path = Path(tempfile.mkdtemp(prefix="llmtool-bench-"))
    (path / "pytest.ini").write_text("", encoding="utf-8")
    try:
        yield path
    finally:
        if keep:
            print(f"kept: {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


def parametrized_test_file(path: Path, n: int) -> None:
    """The baseline: one trivial test parametrized over range(n)."""
    path.write_text(
        "import pytest\n\n\n"
        f'@pytest.mark.parametrize("i", range({n}))\n'
        "def test_item(i):\n"
        "    assert i >= 0\n",
        encoding="utf-8",
    )


def nop_dataset(path: Path, n: int, categories: int = 10) -> None:
    """N bash tasks the `nop` agent passes (their only check, `exit_code:-1`, holds when no
    command ran), spread over `categories` categories."""
    with path.open("w", encoding="utf-8") as stream:
        for i in range(n):
            task = {
                "id": f"t{i:06d}",
                "category": f"c{i % categories}",
                "description": "d",
                "prompt": "p",
                "files": {},
                "expectations": [{"check": "exit_code:-1"}],
            }
            stream.write(json.dumps(task) + "\n")


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    for name in _SCRUBBED_ENV:
        env.pop(name, None)
    return env


def time_run(run: Run, cwd: Path) -> float:
    env = _environment()
    started = time.perf_counter()
    proc = subprocess.run(
        [*PYTEST, *run.args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    run.check(proc.returncode, proc.stdout)
    return elapsed


def measure(
    runs: list[Run], cwd: Path, rounds: int, warm: list[Run] | None = None
) -> dict[str, list[float]]:
    """Run the `warm` commands (default: all) once untimed, then all `rounds` times, interleaved.

    The order is reversed every other round, so neither side always runs first.
    """
    for run in runs if warm is None else warm:
        print(f"  warm-up  {run.label}", flush=True)
        time_run(run, cwd)
    times: dict[str, list[float]] = {run.label: [] for run in runs}
    for index in range(rounds):
        order = runs if index % 2 == 0 else runs[::-1]
        for run in order:
            elapsed = time_run(run, cwd)
            times[run.label].append(elapsed)
            print(f"  round {index + 1}  {run.label:<28} {elapsed:8.3f} s", flush=True)
    return times


def header(title: str, lines: list[str]) -> None:
    print("=" * 78)
    print(title)
    for line in lines:
        print(f"  {line}")
    print(
        f"  python {platform.python_version()}, pytest {pytest.__version__}, "
        f"{os.cpu_count()} CPUs; every time is the wall time of a whole pytest subprocess"
    )
    print("=" * 78, flush=True)


@dataclass(frozen=True)
class Comparison:
    n: int
    base_full: float
    ours_full: float
    base_start: float
    ours_start: float

    @property
    def whole_ratio(self) -> float:
        return self.ours_full / self.base_full

    @property
    def base_per_item(self) -> float:
        return (self.base_full - self.base_start) / (self.n - 1)

    @property
    def ours_per_item(self) -> float:
        return (self.ours_full - self.ours_start) / (self.n - 1)

    @property
    def per_item_ratio(self) -> float:
        # A non-positive baseline cost means the noise swamped the signal: no valid ratio.
        if self.base_per_item <= 0:
            return float("nan")
        return self.ours_per_item / self.base_per_item


def compare(
    times: dict[str, list[float]], n: int, *, base: tuple[Run, Run], ours: tuple[Run, Run]
) -> Comparison:
    """`base` and `ours` are each (the N-item run, the 1-item run)."""

    def med(run: Run) -> float:
        return statistics.median(times[run.label])

    return Comparison(n, med(base[0]), med(ours[0]), med(base[1]), med(ours[1]))


def fmt_ratio(ratio: float) -> str:
    return "n/a" if math.isnan(ratio) else f"{ratio:.2f}x"


def verdict(name: str, ratio: float, target: float) -> bool:
    ok = not math.isnan(ratio) and ratio <= target
    print(
        f"{'PASS' if ok else 'FAIL'}: {name} ours/baseline = {fmt_ratio(ratio)} "
        f"(target <= {target:g}x)"
    )
    return ok


def print_comparison(c: Comparison, what: str) -> None:
    def row(name: str, base: str, ours: str, ratio: str) -> None:
        print(f"  {name:<24} {base:>12} {ours:>12} {ratio:>14}")

    print("-" * 78)
    row("medians", "baseline", "ours", "ours/baseline")
    row(
        f"{what} N={c.n}",
        f"{c.base_full:.3f} s",
        f"{c.ours_full:.3f} s",
        fmt_ratio(c.whole_ratio),
    )
    row(
        "start-up (N=1)",
        f"{c.base_start:.3f} s",
        f"{c.ours_start:.3f} s",
        fmt_ratio(c.ours_start / c.base_start),
    )
    row(
        "per item",
        f"{c.base_per_item * 1e3:.3f} ms",
        f"{c.ours_per_item * 1e3:.3f} ms",
        fmt_ratio(c.per_item_ratio),
    )
    print("  per item = (median time(N) - median time(1)) / (N - 1)")
    print("-" * 78, flush=True)
