"""The plugin's own time per item beside an agent CLI's: Claude Code run alone against a CLI
scenario's items under `--llm-agent=claude-code`.

The fake server from the test suite scripts the same tool loop for both (a shell command that
writes a file, then a last answer), answering at once. Baseline: the real Claude Code run N
times one after another, each with the command line, environment and configuration files the
adapter gives it (`ClaudeCode.invocation`), a fresh HOME and work directory, pointed straight
at the server: what a user running the CLI by hand pays. Ours: one pytest run of a scenario
whose `--llm-trials=N` items each run the same CLI through the plugin (the bubblewrap jail,
the endpoint route, reading its stream, the gates, the report), one item at a time, and the
same run with one item for start-up. Judged: per item, `(time(N) - time(1)) / (N - 1)`
against the median CLI run (target: within 5% of the CLI alone), measured in the same run.
Beside it, not judged: each item's own run as pytest times it, and the endpoint route's cost
(the same CLI run in the jail through the route, and straight to the server sharing the host's
network, as before the route: `sandbox/egress.py`).

    python benchmarks/bench_agents.py [--n 8] [--rounds 3] [--strict] [--keep]

The CLI is found on PATH, or in `$LLMTOOL_AGENT_CLIS_DIR`, as the tests find it; without it
(or without bubblewrap) the benchmark says so and exits 1.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _harness import PASSED, Run, fmt_ratio, header, measure, parse_args, verdict, workdir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from agent_clis import cli_path, search_path
from fake_llm_server import FakeLLMServer, ToolCall, Turn

from pytest_llmtool.agents.installed import installed
from pytest_llmtool.agents.installed.base import Endpoint
from pytest_llmtool.agents.installed.runner import STREAM_LIMIT, run_cli, visible
from pytest_llmtool.sandbox.isolated import make_jail
from pytest_llmtool.sandbox.process import run_shell
from pytest_llmtool.sandbox.workdir import agent_environment

DESCRIPTION = "Per-item time: a CLI scenario under --llm-agent=claude-code vs Claude Code alone."
DEFAULT_N = 8
DEFAULT_ROUNDS = 3
TARGET_PER_ITEM = 1.05
KEY = "sk-bench-not-a-real-key"
MODEL = "claude-sonnet-4-5"
PROMPT = "Run greet and save what it prints to hello.txt."
GREET = "#!/bin/sh\necho hi\n"
SCENARIO = {
    "name": "greet",
    "description": "Greet into a file",
    "template_folder": "template",
    "target": {"binary": "bin/greet"},
    "task": {"prompt": PROMPT},
    "evaluation": {"gates": [{"type": "file_contains", "path": "hello.txt", "substring": "hi"}]},
}


def script(server: FakeLLMServer) -> None:
    """The same loop for every conversation: one command, then a last answer."""
    command = ToolCall("Bash", {"command": "greet > hello.txt"})
    server.script_containing(
        PROMPT,
        [
            Turn(tool_calls=[command], input_tokens=400, output_tokens=20),
            Turn(text="Saved.", input_tokens=450, output_tokens=5),
        ],
    )


def project(root: Path) -> None:
    """The scenario, its template folder and its target tool."""
    (root / "template").mkdir()
    (root / "template" / "README").write_text("a project\n")
    (root / "bin").mkdir()
    tool = root / "bin" / "greet"
    tool.write_text(GREET)
    tool.chmod(0o755)
    (root / "greet.yaml").write_text(yaml.safe_dump(SCENARIO, sort_keys=False))


def cli_alone(executable: str, server_url: str, root: Path, path: str) -> float:
    """One run of Claude Code by hand: the adapter's command line in a fresh HOME and work
    directory, the target tool on PATH, straight to the server; its wall time."""
    home, work = Path(tempfile.mkdtemp(dir=root)), Path(tempfile.mkdtemp(dir=root))
    call = installed("claude-code").invocation(
        executable=executable,
        prompt=PROMPT,
        endpoint=Endpoint("anthropic", MODEL, server_url, KEY),
        home=home,
        workdir=work,
        mcp=None,
    )
    for relative, text in call.files.items():
        (home / relative).parent.mkdir(parents=True, exist_ok=True)
        (home / relative).write_text(text)
    env = {"PATH": f"{root / 'bin'}{os.pathsep}{path}", "HOME": str(home), **call.env}
    started = time.perf_counter()
    done = subprocess.run(
        call.argv, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, check=False
    )
    elapsed = time.perf_counter() - started
    made = (work / "hello.txt").read_text() if (work / "hello.txt").exists() else ""
    if done.returncode != 0 or made.strip() != "hi":
        tail = done.stderr.decode(errors="replace")[-2000:]
        raise SystemExit(f"Claude Code alone did not do the task (exit {done.returncode}):\n{tail}")
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    return elapsed


async def through_route(executable: str, server_url: str, root: Path) -> float:
    """One item's CLI run as the plugin makes it (`run_cli`: the jail without network, the
    relay, the host's proxy), alone: its wall time."""
    item, env = _item(executable, root)
    jail = make_jail(item, env["PATH"], visible(executable))
    started = time.perf_counter()
    run = await run_cli(
        installed("claude-code"),
        prompt=PROMPT,
        endpoint=Endpoint("anthropic", MODEL, server_url, KEY),
        workdir=item / "work",
        home=item / "home",
        env=env,
        jail=jail,
        timeout=120,
    )
    elapsed = time.perf_counter() - started
    if run.trace.agent is None or run.trace.agent.network != "endpoint":
        raise SystemExit("the routed run did not go through the endpoint route")
    return elapsed


async def straight(executable: str, server_url: str, root: Path) -> float:
    """The same run in the same jail sharing the host's network, pointed straight at the
    server with the key: what the route replaced."""
    item, env = _item(executable, root)
    call = installed("claude-code").invocation(
        executable=executable,
        prompt=PROMPT,
        endpoint=Endpoint("anthropic", MODEL, server_url, KEY),
        home=item / "home",
        workdir=item / "work",
        mcp=None,
    )
    for relative, text in call.files.items():
        (item / "home" / relative).parent.mkdir(parents=True, exist_ok=True)
        (item / "home" / relative).write_text(text)
    jail = make_jail(item, env["PATH"], visible(executable), network=True)
    started = time.perf_counter()
    done = await run_shell(
        "exec " + shlex.join(call.argv),
        cwd=item / "work",
        env={**env, "HOME": str(item / "home"), **call.env},
        timeout=120,
        max_output=STREAM_LIMIT,
        jail=jail,
        network=True,
    )
    elapsed = time.perf_counter() - started
    if done.exit_code != 0:
        raise SystemExit(f"the straight run failed (exit {done.exit_code}): {done.stderr[-500:]}")
    return elapsed


def _item(executable: str, root: Path) -> tuple[Path, dict[str, str]]:
    """A fresh item directory (work, home) and the environment a jailed command gets, the
    target tool and the CLI on its PATH."""
    item = Path(tempfile.mkdtemp(dir=root))
    for sub in ("work", "home"):
        (item / sub).mkdir()
    shown = [root / "bin", Path(executable).parent]
    return item, agent_environment(item / "home", {}, shown)


def main() -> int:
    args = parse_args(DESCRIPTION, DEFAULT_N, DEFAULT_ROUNDS)
    n: int = args.n
    executable = cli_path("claude-code")
    if executable is None or shutil.which("bwrap") is None:
        print(
            "bench_agents: needs Claude Code (PATH or $LLMTOOL_AGENT_CLIS_DIR) and bubblewrap",
            file=sys.stderr,
        )
        return 1
    header(
        "bench_agents: per-item time, a CLI scenario under --llm-agent=claude-code vs the CLI",
        [
            f"ours:     {n} items (--llm-trials={n}) of a CLI scenario, one at a time, in the "
            "jail through the endpoint route",
            f"baseline: Claude Code alone, {n} runs one after another, the adapter's command "
            "line, straight to the server",
            "the same fake server scripts both: one shell command, then a last answer",
            f"{args.rounds} interleaved rounds after a warm-up; medians reported",
        ],
    )
    path = search_path()
    with FakeLLMServer() as server, workdir(args.keep) as tmp:
        script(server)
        project(tmp)
        os.environ |= {"PATH": path, "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": KEY}
        common = [
            "greet.yaml",
            "--llm-agent=claude-code",
            "--llm-model=sonnet",
            # One item at a time, as the CLI alone runs: by default 8 would overlap, and their
            # wall time would hide the plugin's own.
            "--llm-concurrency=1",
            "-p",
            "no:randomly",
        ]
        trials = [f"--llm-trials={n}", "--llm-report=out"]
        ours_n = Run(f"ours N={n}", [*common, *trials], PASSED, n)
        ours_1 = Run("ours N=1", common, PASSED, 1)
        alone: list[float] = []
        items: list[float] = []  # each item's own run, as pytest reports its duration
        times: dict[str, list[float]] = {ours_n.label: [], ours_1.label: []}
        cli_alone(executable, server.url, tmp, path)  # warm-up: the CLI's files in the cache
        for index in range(args.rounds):
            runs = measure([ours_1, ours_n], tmp, 1, warm=[ours_1] if index == 0 else [])
            for label, taken in runs.items():
                times[label] += taken
            report = json.loads((tmp / "out" / "report.json").read_text())
            items += [r["run_ms"] / 1000 for r in report["scenarios"] if r.get("run_ms")]
            this = [cli_alone(executable, server.url, tmp, path) for _ in range(n)]
            print(
                f"  round {index + 1}  Claude Code alone, median of {n}  "
                f"{statistics.median(this):8.3f} s",
                flush=True,
            )
            alone += this

        # The route's own cost: the same CLI run in the jail, through it and straight.
        routed, direct = [], []
        for _ in range(max(args.rounds, 3)):
            routed.append(asyncio.run(through_route(executable, server.url, tmp)))
            direct.append(asyncio.run(straight(executable, server.url, tmp)))

    per_run = statistics.median(alone)
    full, start = statistics.median(times[ours_n.label]), statistics.median(times[ours_1.label])
    per_item = (full - start) / (n - 1)
    # A per-item time at or below zero means the noise swamped the signal: no valid ratio.
    ratio = per_item / per_run if per_item > 0 and per_run > 0 else math.nan
    rounds = [
        (f - s) / (n - 1) / statistics.median(alone[i * n : (i + 1) * n])
        for i, (f, s) in enumerate(zip(times[ours_n.label], times[ours_1.label], strict=True))
    ]
    print("-" * 78)
    print(f"  Claude Code alone, per run (median of {len(alone)}): {per_run:.3f} s")
    print(f"  ours, N={n}: {full:.3f} s; N=1 (start-up and one item): {start:.3f} s")
    print(f"  ours, per item = (time(N) - time(1)) / (N - 1): {per_item:.3f} s")
    print(f"  per-item ratio, round by round: {min(rounds):.3f}x-{max(rounds):.3f}x")
    print(f"  the plugin's own time per item: {(per_item - per_run) * 1e3:+.0f} ms")
    inside = statistics.median(items) if items else math.nan
    print(
        f"  an item's own run (pytest's duration, median of {len(items)}): {inside:.3f} s, "
        f"{fmt_ratio(inside / per_run)} the CLI alone (informational: the jail, the route, "
        "the gates; not the run's start and end)"
    )
    via, past = statistics.median(routed), statistics.median(direct)
    print(
        f"  the endpoint route, one CLI run in the jail (median of {len(routed)}): "
        f"{via:.3f} s through it, {past:.3f} s straight to the server, "
        f"{fmt_ratio(via / past)}, {(via - past) * 1e3:+.0f} ms (informational)"
    )
    print("-" * 78, flush=True)
    ok = verdict(f"per-item time ({fmt_ratio(ratio)})", ratio, TARGET_PER_ITEM)
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
