"""Readers of what an optimization run measured: benchmark times and test counts.

Time readers return `{benchmark name: [seconds, ...]}` for `metrics.py`; a benchmark that ran
and failed has an empty list (invalid there, but still counted). Every file comes from a run
the agent could touch, so a defect is a `ValueError` naming the file and the problem, and a
time that is NaN, infinite, zero or negative is rejected with the benchmark's name.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from pytest_llmtool.inputs.untrusted import shorten
from pytest_llmtool.kinds.optimization.metrics import split_name
from pytest_llmtool.records import PytestSummary

Times = dict[str, list[float]]


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: cannot read JSON: {error}") from error


def _seconds(path: Path, name: str, values: Any) -> list[float]:
    """Positive finite numbers, or an error naming the benchmark."""
    if not isinstance(values, list):
        raise ValueError(f"{path}: benchmark {shorten(name)!r}: times are not a list")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{path}: benchmark {shorten(name)!r}: {value!r} is not a number")
        if not math.isfinite(value) or value <= 0:
            raise ValueError(
                f"{path}: benchmark {shorten(name)!r}: time {value!r} is not a positive number"
            )
    return [float(v) for v in values]


def parse_plain(path: Path) -> Times:
    """`{"name": [seconds, ...]}`: the format any other tool can be converted to."""
    data = _load_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object of benchmark name -> [seconds, ...]")
    return {str(name): _seconds(path, str(name), times) for name, times in data.items()}


def parse_asv(path: Path) -> Times:
    """One asv results file (`results/<machine>/<commit>-<env>.json`, format version 2).

    Each parameter combination is its own benchmark, named as asv names it:
    `mod.Class.time_x(10, 'a')`. Times are the recorded samples (`--record-samples`, or
    `--append-samples` as FC-Eval runs it), else asv's one median `result`. Only `time_`
    benchmarks are read: `mem_`, `peakmem_` and `track_` ones are not seconds. A benchmark
    asv could not run (`null`) has no times."""
    data = _load_json(path)
    if not isinstance(data, dict) or data.get("version") != 2:
        version = data.get("version") if isinstance(data, dict) else None
        raise ValueError(f"{path}: not an asv results file of version 2 (version {version!r})")
    columns, results = data.get("result_columns"), data.get("results")
    if not isinstance(columns, list) or not isinstance(results, dict) or "result" not in columns:
        raise ValueError(f"{path}: an asv results file needs `result_columns` and `results`")
    times: Times = {}
    for name, row in results.items():
        if not split_name(name).function.startswith("time_"):
            continue
        if not isinstance(row, list):
            raise ValueError(f"{path}: benchmark {shorten(name)!r}: its row is not a list")
        # asv drops trailing null columns from a row
        cell = dict(zip(columns, row, strict=False))
        times.update(_asv_benchmark(path, name, cell))
    return times


def _asv_benchmark(path: Path, name: str, cell: dict[str, Any]) -> Times:
    params = cell.get("params") or []
    names = (
        [f"{name}({', '.join(map(str, combo))})" for combo in itertools.product(*params)]
        if params
        else [name]
    )
    medians = cell.get("result")
    samples = cell.get("samples")
    if medians is None:
        return {n: [] for n in names}
    if not isinstance(medians, list) or len(medians) != len(names):
        raise ValueError(
            f"{path}: benchmark {shorten(name)!r}: {len(names)} parameter combinations "
            f"but results {shorten(repr(medians), 80)}"
        )
    if not isinstance(samples, list) or len(samples) != len(names):
        samples = [None] * len(names)
    times: Times = {}
    for combo, median, sample in zip(names, medians, samples, strict=True):
        if sample:
            times[combo] = _seconds(path, combo, sample)
        else:
            times[combo] = [] if median is None else _seconds(path, combo, [median])
    return times


def _dotted(fullname: str) -> str:
    """`tests/test_x.py::TestK::test_m[10]` -> `tests.test_x.TestK.test_m(10)`: asv's shape,
    so FC-Eval's name splitting finds the module, class and function."""
    node, bracket, params = fullname.partition("[")
    path, _, rest = node.partition("::")
    module = path.removesuffix(".py").replace("/", ".").replace("\\", ".")
    dotted = ".".join(p for p in (module, *rest.split("::")) if p)
    return f"{dotted}({params.removesuffix(']')})" if bracket else dotted


def parse_pytest_benchmark(path: Path) -> Times:
    """pytest-benchmark's `--benchmark-json` output, names from `fullname` (else `name`)
    in asv's dotted shape. Times are every round's (`stats.data`: `--benchmark-json` always
    writes it, saved runs only with `--benchmark-save-data`), else the one `stats.median`,
    which keeps the median right but gives no interval."""
    data = _load_json(path)
    benchmarks = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benchmarks, list):
        raise ValueError(f"{path}: not pytest-benchmark JSON (no `benchmarks` list)")
    times: Times = {}
    for index, bench in enumerate(benchmarks):
        raw = (bench.get("fullname") or bench.get("name")) if isinstance(bench, dict) else None
        if not isinstance(raw, str):
            raise ValueError(f"{path}: benchmark {index + 1} has no `fullname` or `name`")
        name = _dotted(raw)
        if name in times:
            raise ValueError(f"{path}: benchmark {shorten(name)!r} appears twice")
        stats = bench.get("stats")
        if not isinstance(stats, dict):
            raise ValueError(f"{path}: benchmark {shorten(name)!r} has no `stats`")
        if stats.get("data"):
            times[name] = _seconds(path, name, stats["data"])
        elif "median" in stats:
            times[name] = _seconds(path, name, [stats["median"]])
        else:
            raise ValueError(f"{path}: benchmark {shorten(name)!r}: no `stats.data` or median")
    return times


def parse_junit(path: Path) -> PytestSummary:
    """Test counts from `--junitxml`, summed over its test suites."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read: {error}") from error
    if "<!DOCTYPE" in text or "<!ENTITY" in text:  # JUnit has none; entities can explode
        raise ValueError(f"{path}: JUnit XML with a DTD or entities is not read")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as error:
        raise ValueError(f"{path}: not XML: {error}") from error
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if root.tag not in ("testsuite", "testsuites") or not suites:
        raise ValueError(f"{path}: not JUnit XML (no <testsuite>)")
    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for suite in suites:
        for key in counts:
            value = suite.get(key, "0")
            if not value.isdigit():
                raise ValueError(f"{path}: <testsuite {key}={shorten(value, 40)!r}> is no count")
            counts[key] += int(value)
    failed, errors, skipped = counts["failures"], counts["errors"], counts["skipped"]
    return PytestSummary(
        passed=max(0, counts["tests"] - failed - errors - skipped),
        failed=failed,
        errors=errors,
        skipped=skipped,
    )


# `=== 3 failed, 10 passed, 1 error in 0.5s ===`, or without the rules under `-q`
_SUMMARY = re.compile(r"^=*\s*((?:\d+ [a-z]+(?:, )?)+|no tests ran) in [\d.]+ ?s\b.*$", re.M)
_COUNT = re.compile(r"(\d+) ([a-z]+)")
_FIELDS = {
    "passed": "passed",
    "failed": "failed",
    "error": "errors",
    "errors": "errors",
    "skipped": "skipped",
}


def parse_pytest_summary(text: str, source: str = "pytest output") -> PytestSummary:
    """Test counts from pytest's last summary line; xfailed, xpassed, warnings and
    deselected do not count."""
    lines = _SUMMARY.findall(text)
    if not lines:
        raise ValueError(f"{source}: no pytest summary line (`=== N passed in Xs ===`)")
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    for number, word in _COUNT.findall(lines[-1]):
        if word in _FIELDS:
            counts[_FIELDS[word]] += int(number)
    return PytestSummary(**counts)
