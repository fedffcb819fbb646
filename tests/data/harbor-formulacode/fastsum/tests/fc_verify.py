"""FormulaCode's verifier for one task, small and written for this dataset (after datasmith's
Harbor template: tamper_precheck.py, lsv_measure.py, pytest_runner.py, parser.py).

Writes /logs/verifier/reward.json with FormulaCode's field names and reward.txt with its
formula. Ours, where the template's behaviour is not known or needs its services:
- the reference ("oracle") times are measured here, on tests/oracle/ laid over the
  baseline, not read from FormulaCode's results database;
- the baseline's benchmarks time every tree (an edited benchmark cannot speed itself up);
- a tree unchanged from the baseline is not timed: its speedups are 1 by definition;
- untracked files count in the patch and the tamper precheck (the template's `git diff`
  leaves them out);
- a tampered tree is not timed (`timing_skipped: "tamper"`) and scores -1, as failed tests do;
- reward.json repeats reward.txt's value as `reward` (Harbor reads reward.json first).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RULES = [
    ("benchmarks", r"(^|/)benchmarks?/"),
    ("asv_conf", r"(^|/)asv\.conf"),
    ("snapshots", r"(^|/)\.snapshots/"),
    ("conftest", r"(^|/)conftest\.py$"),
    ("github", r"(^|/)\.github/"),
]
SCOPED = {"snapshots", "conftest"}  # FC_TAMPER_SCOPED=1
ROUNDS = 5
NOISE = 1.08  # max(ln h, ln 1.08) with h = 1.0


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
    ).stdout


def changed_lines(repo: Path, base: str) -> dict[str, list[str]]:
    """Per changed file (untracked included), its added and removed lines."""
    found: dict[str, list[str]] = {}
    current = None
    for line in git(repo, "diff", "-U0", base).splitlines():
        if line.startswith("+++ ") or line.startswith("--- "):
            name = line[4:]
            if name != "/dev/null":
                current = name[2:]
                found.setdefault(current, [])
        elif current and line[:1] in "+-" and not line.startswith(("+++", "---")):
            found[current].append(line[1:])
    for name in git(repo, "ls-files", "--others", "--exclude-standard").splitlines():
        text = (repo / name).read_text(errors="replace")
        found[name] = text.splitlines()
    return found


def patch_info(changes: dict[str, list[str]]) -> dict:
    lines = sum(len(v) for v in changes.values())
    return {"applied": bool(changes), "files": len(changes), "changed_lines": lines}


def tamper_precheck(changes: dict[str, list[str]]) -> dict:
    """Files under a guarded path with a non-blank, non-comment edit; the first rule hit."""
    scoped = os.environ.get("FC_TAMPER_SCOPED") == "1"
    files, rule = [], None
    for name, lines in sorted(changes.items()):
        real = [ln for ln in lines if ln.strip() and not ln.strip().startswith("#")]
        for rule_name, pattern in RULES:
            if scoped and rule_name not in SCOPED:
                continue
            if real and re.search(pattern, name):
                files.append(name)
                rule = rule or rule_name
                break
    return {"files": files, "rule": rule}


TIMER = r"""
import importlib, inspect, json, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]
module = importlib.import_module("bench_fastsum")
rounds = int(sys.argv[3])
found = {}
def timed(name, fn):
    best = None
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        took = time.perf_counter() - start
        best = took if best is None else min(best, took)
    found[name] = best
for name, obj in sorted(vars(module).items()):
    if inspect.isclass(obj) and obj.__module__ == module.__name__:
        for attr in sorted(vars(obj)):
            if attr.startswith("time_"):
                timed(f"bench_fastsum.{name}.{attr}", getattr(obj(), attr))
    elif name.startswith("time_") and callable(obj):
        timed(f"bench_fastsum.{name}", obj)
print(json.dumps(found))
"""


def measure(tree: Path, benchmarks: Path) -> dict[str, float]:
    """Each benchmark's best time over ROUNDS, the package imported from `tree`."""
    done = subprocess.run(
        [sys.executable, "-c", TIMER, str(tree), str(benchmarks), str(ROUNDS)],
        capture_output=True,
        text=True,
        check=False,
    )
    return json.loads(done.stdout) if done.returncode == 0 else {}


def run_tests(tree: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "unittest", "discover", "-s", "tests", "-p", "check_*.py"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    tail = done.stderr.strip().splitlines()[-1:] or [""]
    failed = int(m.group(1)) if (m := re.search(r"failures=(\d+)", tail[0])) else 0
    errors = int(m.group(1)) if (m := re.search(r"errors=(\d+)", tail[0])) else 0
    return {"exit_code": done.returncode, "summary": {"failed": failed, "error": errors}}


SNAPSHOT = r"""
import json, sys
sys.path[:0] = [sys.argv[1]]
from fastsum import mean, total
print(json.dumps({"total": [total(n) for n in (0, 1, 7, 12345)],
                  "mean": [mean(v) for v in ([1], [1, 2], list(range(-50, 77)))]}))
"""


def snapshot(tree: Path) -> str | None:
    done = subprocess.run(
        [sys.executable, "-c", SNAPSHOT, str(tree)], capture_output=True, text=True, check=False
    )
    return done.stdout if done.returncode == 0 else None


def level_key(name: str, level: int) -> str:
    parts = name.split(".")
    return {1: name, 2: ".".join(parts[:2]), 3: parts[0], 4: "all"}[level]


def mean(values: list[float]) -> float | None:
    """The geometric mean, falling back to the arithmetic one when a value is <= 0."""
    if not values:
        return None
    if all(v > 0 for v in values):
        return math.exp(math.fsum(math.log(v) for v in values) / len(values))
    return math.fsum(values) / len(values)


def advantages(agent: dict[str, float], oracle: dict[str, float]) -> dict[str, float | None]:
    """(oracle - agent) / agent per shared benchmark, then per level's groups."""
    per = {n: (oracle[n] - t) / t for n, t in agent.items() if n in oracle and t > 0}
    out: dict[str, float | None] = {}
    for level in (1, 2, 3, 4):
        groups: dict[str, list[float]] = {}
        for name, value in per.items():
            groups.setdefault(level_key(name, level), []).append(value)
        out[f"agent_advantage_level{level}"] = mean(
            [m for g in groups.values() if (m := mean(g)) is not None]
        )
    out["agent_advantage"] = out["agent_advantage_level4"]
    return out


def reward_of(g: float | None, tests_ok: bool, snapshots_ok: bool, tampered: bool) -> float:
    if tampered or not tests_ok or not snapshots_ok or g is None:
        return -1.0
    if g <= 1:
        return 0.25 + 0.75 * g
    return 1 + 2.5 * min(math.log(g) / math.log(NOISE), 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--base", "--repo", "--oracle", "--artifacts", "--out"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    repo, out, artifacts = Path(args.repo), Path(args.out), Path(args.artifacts)
    started = time.monotonic()
    changes = changed_lines(repo, args.base)
    tamper = tamper_precheck(changes)
    work = Path(tempfile.mkdtemp(prefix="fc-"))
    baseline, oracle = work / "baseline", work / "oracle"
    for tree in (baseline, oracle):
        tree.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", args.base], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    shutil.copytree(args.oracle, oracle, dirs_exist_ok=True)
    benchmarks = baseline / "benchmarks"
    test_results = run_tests(repo)
    (artifacts / "test_results.json").write_text(json.dumps({"results": test_results}))
    tests_passed = test_results["exit_code"] == 0 and not (
        test_results["summary"]["failed"] + test_results["summary"]["error"]
    )
    expected, got = snapshot(baseline), snapshot(repo)
    snapshots_passed = expected is not None and got == expected
    timing_skipped = None
    speedups: dict[str, float] = {}
    lsv: dict = {"init": {"baseline_sha": git(repo, "rev-parse", args.base).strip()}}
    adv: dict[str, float | None] = {f"agent_advantage_level{i}": None for i in (1, 2, 3, 4)}
    adv["agent_advantage"] = None
    if tamper["files"]:
        timing_skipped = "tamper"
    else:
        base_times = measure(baseline, benchmarks)
        oracle_times = measure(oracle, benchmarks)
        if changes:
            agent_times = measure(repo, benchmarks)
        else:
            timing_skipped = "no_change"
            agent_times = dict(base_times)
        for name, before in base_times.items():
            now = agent_times.get(name)
            if now and now > 0 and before > 0:
                speedups[name] = 1.0 if timing_skipped else before / now
        adv = advantages(agent_times, oracle_times)
        lsv["measure"] = {
            "benchmarks": {
                n: {"baseline": base_times[n], "current": agent_times.get(n)} for n in base_times
            },
            "selected_count": len(base_times),
            "total_count": len(base_times),
            "skipped_count": 0,
            "error": None if base_times else "no benchmark timed",
        }
    g = mean(list(speedups.values()))
    reward = reward_of(g, tests_passed, snapshots_passed, bool(tamper["files"]))
    fields = {
        "reward": reward,
        **adv,
        "num_valid_benchmarks": len(speedups),
        "per_benchmark_speedups": speedups,
        "lsv_mean_speedup": g,
        "max_speedup": max(speedups.values(), default=None),
        "tests_passed": tests_passed,
        "snapshots_passed": snapshots_passed,
        "lsv_error": lsv.get("measure", {}).get("error"),
        "timing_skipped": timing_skipped,
        "tamper_precheck": tamper,
        "patch": patch_info(changes),
        "lsv": lsv,
        "pytest": test_results,
        "snapshots": {"passed": snapshots_passed},
        "timings": {"test_total_s": round(time.monotonic() - started, 3)},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "reward.json").write_text(json.dumps(fields, indent=2))
    (out / "reward.txt").write_text(f"{reward}\n")
    print(json.dumps({k: fields[k] for k in ("reward", "agent_advantage", "tamper_precheck")}))
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(3 if tamper["files"] else 0)


if __name__ == "__main__":
    main()
