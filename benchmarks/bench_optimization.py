"""Per-item cost of an optimization task beyond its own commands.

Ours: N optimization tasks whose commands are trivial (the benchmark command `echo`es a fixed
plain-format JSON, the test command a pytest summary line, the snapshot command a constant,
the solution `true`), each run once under `--llm-model=oracle`. Every item still goes through
collection and validation, three copies of the project (nop, oracle, agent) with their jails,
the oracle's agent loop, tests, snapshots, interleaved measurement under the host lock,
scoring, and the report. Baseline: the same shell commands, as many times as the plugin runs
them (`COMMANDS_PER_ITEM`), run directly with `subprocess` (`bash -c`), no pytest at all.

Ours is also run with N=1 to take out pytest's start-up: per item = (time(N) - time(1)) /
(N - 1). The result is the per-item overhead (ours - baseline, in ms) and the ratio, with and
without the bubblewrap jail (`--llm-sandbox=none`). The pytest runs get a private TMPDIR, hence
a private benchmark lock, so that other runs on the host do not make them wait. No target is
enforced: the printed one is informational, as the jail's start-up depends on the kernel.

    python benchmarks/bench_optimization.py [--n 20] [--rounds 3] [--keep]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml
from _harness import PASSED, Run, fmt_ratio, header, measure, parse_args, workdir

DESCRIPTION = "Per-item cost of optimization tasks beyond their own shell commands."
DEFAULT_N = 20
DEFAULT_ROUNDS = 3
TARGET_OVERHEAD_MS = 250.0  # informational only

TIMES = {"mod.f": [0.001, 0.001, 0.001]}
BENCH_CMD = f"echo '{json.dumps(TIMES)}' > \"$LLMTOOL_RESULTS/times.json\""
TEST_CMD = "echo '=== 1 passed in 0.01s ==='"
SNAPSHOT_CMD = "echo same"
SOLUTION_CMD = "true"
# What one task with one oracle item runs (rounds 1, warmup 0): the reference's solution,
# tests and snapshot on nop and oracle; the agent's solution, tests and snapshot; then one
# benchmark round over nop, oracle and agent.
ITEM_COMMANDS = [SOLUTION_CMD, TEST_CMD, TEST_CMD, SNAPSHOT_CMD, SNAPSHOT_CMD]
ITEM_COMMANDS += [SOLUTION_CMD, TEST_CMD, SNAPSHOT_CMD, BENCH_CMD, BENCH_CMD, BENCH_CMD]
COMMANDS_PER_ITEM = len(ITEM_COMMANDS)


def write_tasks(directory: Path, n: int) -> None:
    """`n` task files sharing one tiny project."""
    (directory / "project").mkdir(parents=True)
    (directory / "project" / "mod.py").write_text("def f():\n    return 1\n", encoding="utf-8")
    for i in range(n):
        task = {
            "optimization": {
                "name": f"t{i:03d}",
                "category": "bench",
                "project": "project",
                "prompt": "Make f faster.",
                "solution": {"commands": [SOLUTION_CMD]},
                "benchmarks": {
                    "command": BENCH_CMD,
                    "format": "plain",
                    "output": "times.json",
                    "rounds": 1,
                    "warmup": 0,
                },
                "tests": {"command": TEST_CMD, "format": "summary"},
                "snapshot": {"command": SNAPSHOT_CMD},
                "min_speedup": 0.5,
            }
        }
        (directory / f"task_{i:03d}.yaml").write_text(yaml.safe_dump(task), encoding="utf-8")


def time_baseline(n: int, cwd: Path) -> float:
    """The commands of `n` items, run directly one after the other."""
    results = cwd / "results"
    results.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LLMTOOL_RESULTS": str(results)}
    started = time.perf_counter()
    for _ in range(n):
        for command in ITEM_COMMANDS:
            done = subprocess.run(
                ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, check=False
            )
            if done.returncode != 0:
                raise SystemExit(f"baseline command failed ({done.returncode}): {command}")
    return time.perf_counter() - started


def main() -> int:
    args = parse_args(DESCRIPTION, DEFAULT_N, DEFAULT_ROUNDS)
    n: int = args.n
    header(
        "bench_optimization: per-item cost of optimization tasks beyond their commands",
        [
            f"ours:     {n} trivial optimization tasks x --llm-model=oracle, whole pytest run",
            f"baseline: the same {COMMANDS_PER_ITEM} shell commands per item via subprocess",
            "per item: (median time(N) - median time(1)) / (N - 1) for ours",
            "variants: default bubblewrap jail, and --llm-sandbox=none",
        ],
    )
    with workdir(args.keep) as tmp:
        # A private temporary directory, so a private host lock (`HOST_LOCK`): the runs
        # measure the plugin, not other processes of the host that hold the shared lock.
        os.environ["TMPDIR"] = str(tmp / "tmp")
        (tmp / "tmp").mkdir()
        write_tasks(tmp / "n", n)
        write_tasks(tmp / "one", 1)
        model = "--llm-model=oracle"
        none = "--llm-sandbox=none"
        runs = {
            "bwrap": (
                Run(f"ours N={n}", ["n", model], PASSED, n),
                Run("ours N=1", ["one", model], PASSED, 1),
            ),
            "none": (
                Run(f"ours N={n} no jail", ["n", model, none], PASSED, n),
                Run("ours N=1 no jail", ["one", model, none], PASSED, 1),
            ),
        }
        every = [run for pair in runs.values() for run in pair]
        times = measure(every, tmp, args.rounds, warm=[pair[1] for pair in runs.values()])
        base = []
        for index in range(args.rounds):
            elapsed = time_baseline(n, tmp / "one" / "project")
            base.append(elapsed)
            print(f"  round {index + 1}  {'baseline (subprocess)':<28} {elapsed:8.3f} s")

    base_per_item = statistics.median(base) / n
    print("-" * 78)
    print(f"  {'per item':<24} {'baseline':>12} {'ours':>12} {'overhead':>12} {'ratio':>8}")
    overheads = {}
    for label, (full, one) in runs.items():
        whole, start = statistics.median(times[full.label]), statistics.median(times[one.label])
        ours = (whole - start) / (n - 1)
        overheads[label] = (ours - base_per_item) * 1e3
        ratio = ours / base_per_item if base_per_item > 0 else float("nan")
        print(
            f"  {'ours, sandbox=' + label:<24} {base_per_item * 1e3:9.1f} ms "
            f"{ours * 1e3:9.1f} ms {overheads[label]:9.1f} ms {fmt_ratio(ratio):>8}"
        )
    print(f"  ({COMMANDS_PER_ITEM} commands per item; pytest start-up taken out with N=1)")
    print("-" * 78)
    print(
        f"informational: overhead per item with the jail {overheads['bwrap']:.1f} ms "
        f"(target <= {TARGET_OVERHEAD_MS:g} ms), without {overheads['none']:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
