"""What `--llm-early-stop=tasks` saves on a planted 10-trial dataset, and that it changes no
verdict.

The fake server from the test suite answers every model call at once, offline: task alpha is
always done right, beta every other time, gamma never (`tests/test_early_stop.py` plants the
same). The dataset runs with `--llm-trials=10 --llm-task-pass=8/10`, once without early
stopping and once with it, at `--llm-concurrency=4`. Printed: the model calls and the items
run in each, the saving (and the plugin's own estimate of it), and every task's verdict from
both report.json files; it exits 1 when a verdict differs or nothing was saved.

    python benchmarks/bench_early_stop.py [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from _harness import PYTEST, workdir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fake_llm_server import FakeLLMServer, Turn
from helpers import SERVER_KEY, TASKS

HELLO = [Turn(tool_calls=["echo hello"]), Turn(text="Done.")]
REFUSE = [Turn(text="I would rather not.")]
COPY = [
    Turn(tool_calls=["mkdir -p /out && cp /in/a.txt /out/b.txt && wc -l < /out/b.txt"]),
    Turn(text="Copied; it has 2 lines."),
]
SHOW = [Turn(tool_calls=["cat /in/c.txt"]), Turn(text="Shown.")]
ARGS = ["--llm-model=haiku", "--llm-trials=10", "--llm-task-pass=8/10", "--llm-concurrency=4"]


def _run(server: FakeLLMServer, root: Path, name: str, *extra: str) -> dict[str, Any]:
    """One pytest run of the planted dataset: its report, calls and items run."""
    server.reset()
    server.script(TASKS[0]["prompt"], COPY)
    server.script_attempts(TASKS[1]["prompt"], [HELLO, REFUSE])
    server.script(TASKS[2]["prompt"], SHOW)
    env = os.environ | {
        "ANTHROPIC_API_KEY": SERVER_KEY,
        "ANTHROPIC_BASE_URL": server.url,
    }
    done = subprocess.run(
        [*PYTEST, "data.jsonl", *ARGS, f"--llm-report={name}", *extra],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    path = root / name / "report.json"
    if not path.exists():
        raise SystemExit(f"{name}: no report (exit {done.returncode}):\n{done.stdout[-3000:]}")
    report = json.loads(path.read_text(encoding="utf-8"))
    return {
        "calls": len(server.requests),
        "items": len(report["results"]),
        "verdicts": {v["task_id"]: v["verdict"] for v in report["task_verdicts"]},
        "early_stop": report["early_stop"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    keep = parser.parse_args().keep
    with workdir(keep) as root, FakeLLMServer() as server:
        lines = (json.dumps(task) for task in TASKS[:3])
        (root / "data.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        whole = _run(server, root, "whole")
        early = _run(server, root, "early", "--llm-early-stop=tasks")
    stop = early["early_stop"]
    print(f"{'':24}{'model calls':>12}{'items run':>11}")
    print(f"{'without early stop':24}{whole['calls']:>12}{whole['items']:>11}")
    print(f"{'--llm-early-stop=tasks':24}{early['calls']:>12}{early['items']:>11}")
    saved = whole["calls"] - early["calls"]
    print(
        f"saved: {saved} model calls ({saved / whole['calls']:.0%}), "
        f"{whole['items'] - early['items']} items; the run's own estimate: "
        f"~{stop['calls_saved']:g} calls, {stop['trials_skipped']} trials not needed"
    )
    for task in sorted(whole["verdicts"]):
        print(f"  {task}: {whole['verdicts'][task]} / {early['verdicts'].get(task)}")
    same = whole["verdicts"] == early["verdicts"]
    print("verdicts: " + ("the same" if same else "DIFFERENT"))
    return 0 if same and saved > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
