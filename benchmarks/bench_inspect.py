"""Whole-process time of N two-turn bash samples: pytest-llmtool against Inspect AI.

The same work on both sides, offline: each sample's model asks for one bash call
(`echo hello`), gets its output, and answers; a scorer checks the answer. Ours: N JSONL
bash tasks under `--llm-model=oracle` (the tool call is the task's solution, the second
turn its closing reply), each in a fresh bashkit sandbox, scored by `stdout_contains`.
Inspect: the same N samples with `mockllm/model` scripted to make the same two replies,
`bash()` in Inspect's `local` sandbox, scored by `includes()`. Each side runs in a venv of
its own (under `~/.cache/pytest-llmtool-bench/`, made on first use from PyPI): Inspect AI's
dependencies cannot change ours, and ours is this checkout as `pip install` makes it, every
feature on (the run's history is written). Each side runs `--rounds` times, interleaved, after a
warm-up that writes both sides' bytecode caches; the judged number is the ratio of medians.

    python benchmarks/bench_inspect.py [--n 200] [--rounds 3] [--strict]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _harness import PYTEST, header, workdir

INSPECT_VERSION = "0.3.285"
TARGET = 10.0
VENV = Path.home() / ".cache" / "pytest-llmtool-bench" / f"inspect-{INSPECT_VERSION}"

INSPECT_SCRIPT = """
import sys

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import bash

n = int(sys.argv[1])
outputs = []
for _ in range(n):
    for output in (
        ModelOutput.for_tool_call("mockllm/model", "bash", {"cmd": "echo hello"}),
        ModelOutput.from_content("mockllm/model", "hello"),
    ):
        # Usage given, so mockllm does not count tokens (tiktoken would download its tables).
        output.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
        outputs.append(output)
task = Task(
    dataset=[Sample(id=f"t{i}", input="print hello", target="hello") for i in range(n)],
    solver=[use_tools(bash()), generate()],
    scorer=includes(),
    sandbox="local",
)
model = get_model("mockllm/model", custom_outputs=outputs)
log = eval(task, model=model, log_dir="inspect-logs", display="none")[0]
accuracy = log.results.scores[0].metrics["accuracy"].value if log.results else None
print(f"inspect: {log.status}, {len(log.samples or [])} samples, accuracy {accuracy}")
if log.status != "success" or accuracy != 1.0 or len(log.samples or []) != n:
    sys.exit(1)
"""


def ours_python() -> Path:
    """A venv holding this checkout as a user installs it (`pip install`, no extras), made
    on first use and again when `pyproject.toml` changes: the venv that runs the benchmarks
    also has the development extras, and their pytest plugins (anyio's imports trio, which
    selenium brings) cost every pytest run there some 0.3 s a user does not pay."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()[:12]
    venv = VENV.parent / f"ours-{digest}"
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"installing this checkout into {venv} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(root)], check=True)
    return python


def inspect_python() -> Path:
    """The venv's python, installing Inspect AI there the first time."""
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"installing inspect-ai=={INSPECT_VERSION} into {VENV} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"inspect-ai=={INSPECT_VERSION}"],
            check=True,
        )
    return python


def tasks(path: Path, n: int) -> None:
    with path.open("w", encoding="utf-8") as stream:
        for i in range(n):
            task = {
                "id": f"t{i:05d}",
                "category": "c",
                "description": "d",
                "prompt": "print hello",
                "files": {},
                "expectations": [{"check": "stdout_contains:hello"}],
                "solution": "echo hello",
            }
            stream.write(json.dumps(task) + "\n")


def timed(command: list[str], cwd: Path, check: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or check not in done.stdout:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise SystemExit(f"{command[:3]} failed (exit {done.returncode}):\n{tail}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="samples (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when under the target")
    args = parser.parse_args()
    python = inspect_python()
    ours_py = ours_python()
    header(
        "bench_inspect: whole-process time, pytest-llmtool against Inspect AI",
        [
            f"{args.n} two-turn bash samples (one `echo hello` call, then the answer)",
            f"ours: --llm-model=oracle, bashkit; Inspect AI {INSPECT_VERSION}: mockllm, "
            "bash() in the local sandbox; each side in a venv of its own",
            f"{args.rounds} interleaved rounds after a warm-up; medians and ranges reported",
        ],
    )
    with workdir(keep=False) as tmp:
        tasks(tmp / "tasks.jsonl", args.n)
        (tmp / "run_inspect.py").write_text(INSPECT_SCRIPT, encoding="utf-8")
        # Every feature on, as a user runs it: the run's history is written too.
        ours = [str(ours_py), *PYTEST[1:], "tasks.jsonl", "--llm-model=oracle"]
        theirs = [str(python), "run_inspect.py", str(args.n)]
        passed = f"{args.n} passed"
        timed(ours, tmp, passed)
        timed(theirs, tmp, "inspect: success")
        times: dict[str, list[float]] = {"ours": [], "inspect": []}
        for index in range(args.rounds):
            order = [("ours", ours, passed), ("inspect", theirs, "inspect: success")]
            for label, command, check in order if index % 2 == 0 else order[::-1]:
                elapsed = timed(command, tmp, check)
                times[label].append(elapsed)
                print(f"  round {index + 1}  {label:<8} {elapsed:8.3f} s", flush=True)
    median = {k: statistics.median(v) for k, v in times.items()}
    ratio = median["inspect"] / median["ours"]
    ratios = sorted(b / a for a, b in zip(times["ours"], times["inspect"], strict=True))
    for label, values in times.items():
        print(
            f"{label:<8} median {median[label]:.2f} s (range {min(values):.2f}-{max(values):.2f})"
        )
    print(
        f"ours is {ratio:.1f}x faster than Inspect AI (per-round ratios "
        f"{ratios[0]:.1f}-{ratios[-1]:.1f}; target >= {TARGET:.0f}x)"
    )
    return 1 if args.strict and ratio < TARGET else 0


if __name__ == "__main__":
    sys.exit(main())
