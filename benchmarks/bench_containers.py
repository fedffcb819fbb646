"""What the container sandbox costs an item beside the docker CLI used by hand.

Ours: what an item's path does with its container, `ContainerSandbox.start` (the plugin's
`docker run -d` with its labels, `--init` and `--network none`, the engine described once),
one bash-tool call (`run`: an `exec` that keeps the working directory, under a timeout) and
`release` (`docker rm -f -v`). Baseline: a bare `docker run -d --network none IMAGE sleep
infinity`, `docker exec ID sh -c 'echo hi'` and `docker rm -f ID`, each a CLI process, of the
same image. Both run one item at a time, taking turns within each round (the order reversed
every other round); the verdict is the ratio of the medians per item (target: at most 1.3x).

With `--harbor`, also (informational) a whole Harbor item under the oracle (image found,
container, solution, verifier, rewards read, removal) as pytest runs it, one item at a time:
per item, `(time(N) - time(1)) / (N - 1)` of `--llm-trials=N` against one, beside the bare
sequence.

    python benchmarks/bench_containers.py [--n 10] [--rounds 3] [--harbor] [--strict] [--keep]

It needs a container engine whose daemon answers and `local/debian:bookworm` on it
(docs/containers.md, "The base image"); without them it says so and exits 1. It removes every
container it starts; the Harbor task's image (`llmtool/bench-touch:...`, the base image with
a working directory) is kept, as the plugin keeps task images for later runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _harness import PASSED, Run, fmt_ratio, measure, verdict, workdir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from containers import BASE_IMAGE, docker_available

from pytest_llmtool.sandbox.container.engine import LABEL, ContainerSpec, Engine
from pytest_llmtool.sandbox.container.images import ImageRef, image_id
from pytest_llmtool.sandbox.container.sandbox import ContainerSandbox

DESCRIPTION = "Per-item cost: the container sandbox vs a bare docker run -d + exec + rm -f."
DEFAULT_N = 10
DEFAULT_ROUNDS = 3
TARGET_PER_ITEM = 1.3
# The bare sequence's containers carry this label too, so that nothing of ours is left behind.
BENCH_LABEL = f"{LABEL}.bench=1"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--n", type=int, default=DEFAULT_N, help=f"items per round ({DEFAULT_N})")
    parser.add_argument(
        "--rounds", type=int, default=DEFAULT_ROUNDS, help=f"timed rounds ({DEFAULT_ROUNDS})"
    )
    parser.add_argument("--harbor", action="store_true", help="also time a Harbor item")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target is missed")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    if args.n < 2:
        parser.error("--n must be at least 2")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def bare(cli: str) -> float:
    """One item by hand: run, exec, remove, each a `docker` process; its wall time."""
    started = time.perf_counter()
    made = subprocess.run(
        [
            cli,
            "run",
            "-d",
            "--label",
            BENCH_LABEL,
            "--network",
            "none",
            BASE_IMAGE,
            "sleep",
            "infinity",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    container = made.stdout.strip()
    said = subprocess.run(
        [cli, "exec", container, "sh", "-c", "echo hi"], capture_output=True, text=True, check=True
    )
    subprocess.run([cli, "rm", "-f", container], capture_output=True, check=True)
    elapsed = time.perf_counter() - started
    if said.stdout != "hi\n":
        raise SystemExit(f"the bare exec said {said.stdout!r}, not 'hi'")
    return elapsed


async def ours(engine: Engine, image: ImageRef) -> float:
    """One item's container as the plugin's item path has it; its wall time."""
    started = time.perf_counter()
    sandbox = await ContainerSandbox.start(engine, ContainerSpec(image.ref), image)
    try:
        said = await sandbox.run("echo hi")
    finally:
        await sandbox.release()
    elapsed = time.perf_counter() - started
    if said.stdout != "hi\n" or said.exit_code != 0:
        raise SystemExit(f"the sandbox's call said {said.stdout!r} (exit {said.exit_code})")
    return elapsed


TASK_TOML = '[task]\nname = "bench/touch"\n\n[agent]\ntimeout_sec = 60.0\n'


def harbor_task(root: Path) -> None:
    """A one-file Harbor task, its image `FROM` the base image with nothing added."""
    task = root / "touch"
    for sub in ("environment", "solution", "tests"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text(TASK_TOML)
    (task / "instruction.md").write_text("Create /app/done.\n")
    (task / "environment" / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\ntouch /app/done\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\n[ -e /app/done ] && echo 1 > /logs/verifier/reward.txt\n"
    )


def harbor_items(n: int, rounds: int, root: Path) -> tuple[float, list[float]]:
    """Per item of a Harbor task under the oracle, and each item's own time from the report."""
    harbor_task(root)
    # One item at a time, as the bare sequence runs: overlapping items would hide their cost.
    common = ["touch/task.toml", "--llm-model=oracle", "--llm-concurrency=1", "-p", "no:randomly"]
    many = Run(f"harbor N={n}", [*common, f"--llm-trials={n}", "--llm-report=many"], PASSED, n)
    one = Run("harbor N=1", [*common, "--llm-trials=1"], PASSED, 1)
    times = measure([many, one], root, rounds)
    report = json.loads((root / "many" / "report.json").read_text())
    each = [r["duration_ms"] / 1000 for r in report.get("harbor_results", [])]
    per_item = (statistics.median(times[many.label]) - statistics.median(times[one.label])) / (
        n - 1
    )
    return per_item, each


async def sandbox_rounds(
    engine: Engine, image: ImageRef, n: int, rounds: int
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"bare": [], "ours": []}
    bare(engine.cli)  # warm-up: the image's layers in the page cache, the CLI's files
    await ours(engine, image)
    for index in range(rounds):
        order = ["bare", "ours"] if index % 2 == 0 else ["ours", "bare"]
        for label in order:
            taken = []
            for _ in range(n):
                taken.append(bare(engine.cli) if label == "bare" else await ours(engine, image))
            times[label] += taken
            print(
                f"  round {index + 1}  {label:<5} median of {n}: {statistics.median(taken):8.3f} s",
                flush=True,
            )
    return times


def main() -> int:
    args = parse()
    reason = docker_available()
    if reason is not None:
        print(f"bench_containers: {reason}", file=sys.stderr)
        return 1
    engine = Engine.find()
    found = asyncio.run(image_id(engine, BASE_IMAGE))
    assert found is not None  # docker_available saw it
    image = ImageRef(BASE_IMAGE, found, built=False)
    print("=" * 78)
    print("bench_containers: per-item cost of the container sandbox vs the docker CLI by hand")
    print(f"  ours:     ContainerSandbox.start + run('echo hi') + release, {args.n} per round")
    print(f"  baseline: docker run -d --network none + exec + rm -f, {args.n} per round")
    print(f"  image {BASE_IMAGE} on {engine.endpoint()}; {args.rounds} interleaved rounds")
    described = asyncio.run(engine.describe())
    print(f"  python {platform.python_version()}, {os.cpu_count()} CPUs; {described}")
    print("=" * 78, flush=True)
    try:
        times = asyncio.run(sandbox_rounds(engine, image, args.n, args.rounds))
        harbor: tuple[float, list[float]] | None = None
        if args.harbor:
            with workdir(args.keep) as root:
                harbor = harbor_items(args.n, args.rounds, root)
    finally:
        left = subprocess.run(
            [engine.cli, "ps", "-aq", "--filter", f"label={BENCH_LABEL}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        if left:
            subprocess.run([engine.cli, "rm", "-f", *left], capture_output=True, check=False)
    base, mine = statistics.median(times["bare"]), statistics.median(times["ours"])
    ratio = mine / base if base > 0 else math.nan
    print("-" * 78)
    print(f"  bare docker, per item (median of {len(times['bare'])}): {base:.3f} s")
    print(f"  the sandbox, per item (median of {len(times['ours'])}): {mine:.3f} s")
    print(f"  the sandbox's own cost per item: {(mine - base) * 1e3:+.0f} ms")
    if harbor is not None:
        per_item, each = harbor
        inside = statistics.median(each) if each else math.nan
        # At or below zero, the noise swamped the signal: no valid figure.
        shown = f"{per_item:.3f} s" if per_item > 0 else "n/a"
        print(
            f"  a Harbor item under the oracle, per item: {shown}, "
            f"{fmt_ratio(per_item / base if per_item > 0 else math.nan)} the bare sequence"
        )
        print(
            f"  a Harbor item's own run (median of {len(each)}): {inside:.3f} s, "
            f"{fmt_ratio(inside / base)} the bare sequence (informational: a trial makes a "
            "dozen docker calls)"
        )
    print("-" * 78, flush=True)
    ok = verdict("per-item time", ratio, TARGET_PER_ITEM)
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
