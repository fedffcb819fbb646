"""Cost of the report's charts, against the cost of writing the report itself.

Ours: `charts(report)` (`pytest_llmtool/report/charts.py`) on a generated run of N bash task
results over 2 models and 20 categories, every result with a trace of a few tool calls and
priced model calls of growing input, so the pass-rate, context-growth, cost and tool-call
charts are all drawn. Baseline: `report.model_dump_json()` of the same report, what
`report.json` costs. Both run in this process, interleaved, `--rounds` times after one
untimed warm-up each; the first `charts()` call, which imports matplotlib, is reported apart.
No target: the ratio is informational.

    python benchmarks/bench_charts.py [--n 5000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable

from pytest_llmtool.kinds.bash.summary import summary_fields
from pytest_llmtool.records import (
    AgentTrace,
    EvalReport,
    LLMCallMetrics,
    ModelInfo,
    RunMetadata,
    ScoreResult,
    TaskResult,
    TaskScore,
    ToolCallResult,
)
from pytest_llmtool.report.charts import available, charts

DESCRIPTION = "Cost of charts(report) against report.model_dump_json()."
DEFAULT_N = 5000
DEFAULT_ROUNDS = 5
MODELS = ("model-a", "model-b")
CATEGORIES = 20


def _trace(rng: random.Random, price: float) -> AgentTrace:
    """A run of 0-8 tool calls: a model call per tool call and a final answer, each call's
    prompt the previous one plus what the last tool printed."""
    tool_calls = rng.randint(0, 8)
    tokens, calls = 1200, []
    for number in range(1, tool_calls + 2):
        calls.append(
            LLMCallMetrics(
                call_number=number,
                input_tokens=tokens,
                output_tokens=80,
                latency_ms=900.0,
                cumulative_input=tokens * number,
                tool_calls_made=1 if number <= tool_calls else 0,
                cost_usd=tokens * price,
            )
        )
        tokens += rng.randint(100, 600)
    commands = [
        ToolCallResult(commands=f"echo {i}", stdout=f"{i}\n", stderr="", exit_code=0)
        for i in range(tool_calls)
    ]
    return AgentTrace(
        tool_calls=commands,
        turns=len(calls),
        natural_stop=True,
        total_input_tokens=sum(c.input_tokens for c in calls),
        total_output_tokens=sum(c.output_tokens for c in calls),
        duration_ms=1000 * len(calls),
        llm_calls=calls,
    )


def build_report(n: int) -> EvalReport:
    """N results, alternating models, round-robin categories, summarised as the plugin does."""
    rng = random.Random(0)
    results = []
    for i in range(n):
        model = MODELS[i % len(MODELS)]
        task_id = f"t{i // len(MODELS):05d}"
        check = ScoreResult(
            check="exit_code:0", passed=rng.random() < 0.7 - 0.2 * (i % 2), detail="", weight=1.0
        )
        results.append(
            TaskResult(
                nodeid=f"tasks.jsonl::{task_id}[{model}]",
                model=model,
                task_id=task_id,
                category=f"category_{(i // len(MODELS)) % CATEGORIES:02d}",
                score=TaskScore.of(task_id, [check]),
                trace=_trace(rng, 3e-6 * (1 + 4 * (i % 2))),
            )
        )
    metadata = RunMetadata(
        plugin="bench",
        pytest="9",
        python=platform.python_version(),
        models=[ModelInfo(name=m, provider="bench", model_id=m) for m in MODELS],
        max_turns=10,
        started="2025-01-01T00:00:00",
        finished="2025-01-01T00:10:00",
        exit_status=0,
    )
    return EvalReport(metadata=metadata, **summary_fields(results, []))


def _time(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--n", type=int, default=DEFAULT_N, help=f"results (default {DEFAULT_N})")
    parser.add_argument(
        "--rounds", type=int, default=DEFAULT_ROUNDS, help=f"timed rounds ({DEFAULT_ROUNDS})"
    )
    args = parser.parse_args()
    if not available():
        raise SystemExit("matplotlib is not installed: pip install 'pytest-llmtool[charts]'")
    print("=" * 78)
    print("bench_charts: charts(report) vs report.model_dump_json(), in process")
    print(f"  {args.n} bash results, {len(MODELS)} models, {CATEGORIES} categories")
    print(f"  {args.rounds} interleaved rounds after one warm-up each; medians reported")
    print(f"  python {platform.python_version()}, {os.cpu_count()} CPUs")
    print("=" * 78, flush=True)

    report = build_report(args.n)
    cold = _time(lambda: charts(report))
    _time(report.model_dump_json)
    times: dict[str, list[float]] = {"charts": [], "json": []}
    for index in range(args.rounds):
        order = ["charts", "json"] if index % 2 == 0 else ["json", "charts"]
        for what in order:
            action = (lambda: charts(report)) if what == "charts" else report.model_dump_json
            times[what].append(_time(action))
            print(f"  round {index + 1}  {what:<8} {times[what][-1]:8.3f} s", flush=True)

    drawn = charts(report)
    ours, base = statistics.median(times["charts"]), statistics.median(times["json"])
    print("-" * 78)
    print(f"  model_dump_json()          {base:8.3f} s  ({len(report.model_dump_json()):,} chars)")
    print(f"  charts()                   {ours:8.3f} s  ({len(drawn)} charts)")
    print(f"  first charts() (+import)   {cold:8.3f} s")
    for chart in drawn:
        print(f"    {chart.name:<24} {len(chart.svg):>8,} chars of SVG")
    print(f"charts/json = {ours / base:.2f}x (informational)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
