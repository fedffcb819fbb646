"""The run report's charts (`report/charts.py`): which appear for which data, and that each is
a well-formed, deterministic SVG element in which hostile names stay inert text."""

from __future__ import annotations

import re
import sys
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_llmtool.kinds.bash.summary import summary_fields as bash_fields
from pytest_llmtool.kinds.scenario.summary import summary_fields as scenario_fields
from pytest_llmtool.records import (
    AgentRunSummary,
    AgentTrace,
    EvalReport,
    EvaluationResult,
    GateResult,
    InteractionMetrics,
    Interval,
    LLMCallMetrics,
    ModelInfo,
    OptimizationRunSummary,
    RunMetadata,
    ScenarioResult,
    ScoreResult,
    TaskResult,
    TaskScore,
    ToolCallResult,
    TrialSummary,
)
from pytest_llmtool.report import MarkdownWriter
from pytest_llmtool.report import charts as charts_module
from pytest_llmtool.report.charts import Chart, Traced, available, charts, label
from pytest_llmtool.report.store import ResultStore

SVG = "{http://www.w3.org/2000/svg}"
EVERY_CHART = [
    "pass_rate_by_category",
    "context_growth",
    "cost_vs_pass_rate",
    "pass_at_k",
    "speedups",
    "turns_per_task",
    "scenario_gates",
]
SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"


def _trace(
    tool_calls: int, tokens: list[int] | None = None, cost: float | None = None
) -> AgentTrace:
    """A trace of `tool_calls` bash calls and one model call per entry of `tokens` (input
    tokens; a call per tool call plus a final answer when not given)."""
    tokens = tokens if tokens is not None else [0] * (tool_calls + 1)
    calls = [
        LLMCallMetrics(
            call_number=i + 1,
            input_tokens=t,
            output_tokens=10 if t else 0,
            latency_ms=1.0,
            cumulative_input=sum(tokens[: i + 1]),
            tool_calls_made=1 if i < tool_calls else 0,
            cost_usd=cost,
        )
        for i, t in enumerate(tokens)
    ]
    commands = [ToolCallResult(commands="true", stdout="", stderr="", exit_code=0)] * tool_calls
    return AgentTrace(tool_calls=commands, turns=len(calls), llm_calls=calls)


def _task(
    model: str,
    category: str,
    passed: bool,
    index: int = 0,
    *,
    tool_calls: int = 2,
    tokens: list[int] | None = None,
    cost: float | None = None,
) -> TaskResult:
    task_id = f"{category}-{index}"
    check = ScoreResult(check="exit_code:0", passed=passed, detail="", weight=1.0)
    return TaskResult(
        nodeid=f"tasks.jsonl::{task_id}[{model}]",
        model=model,
        task_id=task_id,
        category=category,
        score=TaskScore.of(task_id, [check]),
        trace=_trace(tool_calls, tokens, cost),
    )


def _scenario(
    model: str, name: str, gates_passed: int, guidance: str | None = None, tool_calls: int = 3
) -> ScenarioResult:
    gates = [GateResult(gate_type="g", passed=i < gates_passed, message="") for i in range(4)]
    suffix = f"{model}-{guidance}" if guidance else model
    return ScenarioResult(
        nodeid=f"{name}.yaml::{name}[{suffix}]",
        model=model,
        scenario=name,
        guidance=guidance,
        tags=[],
        tier=1,
        evaluation=EvaluationResult(
            interaction=InteractionMetrics(),
            gates=gates,
            gates_passed=gates_passed,
            gates_total=len(gates),
            outcome="pass" if gates_passed == len(gates) else "fail",
        ),
        trace=_trace(tool_calls),
        notes=[],
        artifacts="",
        duration_ms=1,
    )


def _report(
    results: list[TaskResult] = (),  # type: ignore[assignment]
    scenarios: list[ScenarioResult] = (),  # type: ignore[assignment]
    **fields: Any,
) -> EvalReport:
    """A report as the plugin builds it: the summaries computed from the results."""
    models = dict.fromkeys([r.model for r in results] + [s.model for s in scenarios])
    metadata = RunMetadata(
        plugin="0",
        pytest="9",
        python="3",
        models=[ModelInfo(name=m, provider="offline", model_id=m) for m in models],
        max_turns=10,
        started="2025-01-01T00:00:00",
        finished="2025-01-01T00:00:01",
        exit_status=0,
    )
    summaries: dict[str, Any] = bash_fields(list(results), []) if results else {}
    if scenarios:
        summaries |= scenario_fields(list(scenarios))
    return EvalReport(metadata=metadata, **summaries, **fields)


def _interval(estimate: float, low: float, high: float) -> Interval:
    return Interval(estimate=estimate, low=low, high=high, n=10, method="t")


def _offline() -> list[TaskResult]:
    """Two offline models (no tokens, no cost) over two categories."""
    return [
        _task(model, category, passed=model == "oracle", index=i, tool_calls=i % 3)
        for model in ("oracle", "nop")
        for category in ("files", "text")
        for i in range(3)
    ]


def _full() -> EvalReport:
    """A report with data for every chart."""
    results = [
        _task(m, c, passed=(i + len(m)) % 3 > 0, index=i, tokens=[900, 1400, 2100], cost=0.002)
        for m in ("alpha", "beta")
        for c in ("files", "text", "json")
        for i in range(4)
    ]
    scenarios = [
        _scenario(m, f"s{i}", gates_passed=i % 5, guidance=g)
        for m in ("alpha", "beta")
        for g in ("AGENTS.v1.md", "AGENTS.v2.md")
        for i in range(3)
    ]
    trials = {
        "bash": {
            m: TrialSummary(
                trials=3,
                tasks=4,
                pass_at_k={1: 0.5, 2: 0.7, 3: 0.8},
                pass_at_k_ci={k: _interval(v, v - 0.2, min(1, v + 0.2)) for k, v in ((1, 0.5),)},
            )
            for m in ("alpha", "beta")
        }
    }
    optimization = OptimizationRunSummary(
        by_agent={
            f"builtin:{m}": AgentRunSummary(
                tasks=3,
                attempts=3,
                mean_speedup=speedup,
                mean_speedup_ci=_interval(speedup, 0.0, speedup * 3),
                mean_success_rate=1.0,
                num_benchmarks=3,
                num_valid_benchmarks=3,
                mean_cost_per_task=0.0,
                mean_trajectory_length=2.0,
                accuracy=1.0,
                total_cost=0.0,
            )
            for m, speedup in (("alpha", 12.0), ("beta", 0.8))
        }
    )
    return _report(results, scenarios, trials=trials, optimization=optimization)


def _names(found: list[Chart]) -> list[str]:
    return [c.name for c in found]


def _parse(chart: Chart) -> ET.Element:
    return ET.fromstring(chart.svg)


def _texts(chart: Chart) -> list[str]:
    return [e.text or "" for e in _parse(chart).iter(f"{SVG}text")]


@pytest.fixture(scope="module")
def full() -> list[Chart]:
    pytest.importorskip("matplotlib")
    return charts(_full())


def test_what_the_charts_read_along_the_results_is_what_they_gather() -> None:
    report = _full()
    stores: dict[str, ResultStore[Any]] = {
        "bash": ResultStore(TaskResult),
        "scenario": ResultStore(ScenarioResult),
    }
    for r in report.results:
        stores["bash"].append(r)
    for s in report.scenarios:
        stores["scenario"].append(s)
    fed = Traced()
    done = fed.read_along(stores)
    assert not done()
    for store in stores.values():
        list(store)  # the summaries' pass
    assert done()
    gathered = Traced(report)
    assert fed.tokens() == gathered.tokens() and fed.tool_calls() == gathered.tool_calls()
    assert fed.tokens()[1] > 0 and fed.tool_calls()
    assert [c.svg for c in charts(report, fed)] == [c.svg for c in charts(report)]


def test_a_writer_whose_reader_along_was_not_fed_gathers_for_itself(tmp_path: Path) -> None:
    report = _full()
    store: ResultStore[TaskResult] = ResultStore(TaskResult)
    for r in report.results:
        store.append(r)
    writer = MarkdownWriter()
    writer.before_report({"bash": store}, (), tmp_path)
    next(iter(store))  # a pass that stopped at the first result
    writer.files(report, (), tmp_path)
    drawn = {c.name: c.svg for c in charts(report)}
    written = {p.stem: p.read_text(encoding="utf-8") for p in (tmp_path / "charts").iterdir()}
    assert written == drawn and "context_growth" in written  # drawn from what was gathered


def test_charts_are_empty_without_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert available() is False
    assert charts(_full()) == []


def test_every_chart_appears_when_the_report_has_data_for_it(full: list[Chart]) -> None:
    assert available() is True
    assert _names(full) == EVERY_CHART
    for chart in full:
        assert re.fullmatch(r"[a-z_]+", chart.name)
        assert chart.title and chart.svg.startswith("<svg ")


def test_an_offline_run_charts_pass_rates_and_tool_calls_only() -> None:
    """oracle and nop report no tokens and no cost: no context or cost chart, no trials, no
    optimization, no scenarios."""
    pytest.importorskip("matplotlib")
    assert _names(charts(_report(_offline()))) == ["pass_rate_by_category", "turns_per_task"]


def test_an_empty_report_has_no_chart() -> None:
    pytest.importorskip("matplotlib")
    assert charts(_report()) == []


def test_no_tool_calls_anywhere_is_no_tool_call_chart() -> None:
    pytest.importorskip("matplotlib")
    report = _report([_task("nop", "files", False, tool_calls=0)])
    assert _names(charts(report)) == ["pass_rate_by_category"]


def test_context_growth_leaves_out_models_without_token_counts() -> None:
    pytest.importorskip("matplotlib")
    results = [_task("real", "files", True, tokens=[100, 250, 400])]
    results += [_task("offline", "files", True)]
    [chart] = [c for c in charts(_report(results)) if c.name == "context_growth"]
    texts = _texts(chart)
    assert "real" in texts
    assert "offline" not in texts


def test_cost_needs_a_priced_model_and_draws_scenarios_apart() -> None:
    pytest.importorskip("matplotlib")
    priced = [_task("paid", "files", True, tokens=[10, 20, 30], cost=0.01)]
    scenarios = [_scenario("paid", "s", 4)]
    scenarios[0].trace = _trace(2, [10, 20, 30], cost=0.02)
    report = _report([*priced, _task("free", "files", True)], scenarios)
    [chart] = [c for c in charts(report) if c.name == "cost_vs_pass_rate"]
    assert {"paid, bash tasks", "paid, scenarios"} <= set(_texts(chart))
    assert "free, bash tasks" not in _texts(chart)


def test_scenario_gates_are_split_by_guidance_document() -> None:
    pytest.importorskip("matplotlib")
    scenarios = [_scenario("m", "s", 2, guidance="AGENTS.v1.md"), _scenario("m", "s", 4)]
    [chart] = [c for c in charts(_report(scenarios=scenarios)) if c.name == "scenario_gates"]
    assert {"AGENTS.v1.md", "(none)"} <= set(_texts(chart))


def test_pass_at_k_names_the_kind_when_there_are_several() -> None:
    pytest.importorskip("matplotlib")
    summary = TrialSummary(trials=2, pass_at_k={1: 0.4, 2: 0.6})
    report = _report(trials={"bash": {"m": summary}, "scenario": {"m": summary}})
    [chart] = charts(report)
    assert chart.name == "pass_at_k"
    assert {"m, bash", "m, scenario"} <= set(_texts(chart))


def test_speedups_label_plainly_on_a_log_scale(full: list[Chart]) -> None:
    """matplotlib's own log-axis labels are math text, shown raw with math parsing off."""
    [chart] = [c for c in full if c.name == "speedups"]
    texts = _texts(chart)
    assert "1x" in texts and "10x" in texts
    assert not any("$" in t or "mathdefault" in t for t in texts)


def test_every_chart_is_an_inline_svg_element(full: list[Chart]) -> None:
    for chart in full:
        root = _parse(chart)
        assert root.tag == f"{SVG}svg"
        assert root.get("viewBox") and "max-width: 100%" in (root.get("style") or "")
        assert root.get("aria-label") == chart.title
        assert "<?xml" not in chart.svg and "DOCTYPE" not in chart.svg
        # matplotlib's catch-all stylesheet is scoped to the chart, not to the whole page.
        [style] = root.iter(f"{SVG}style")
        assert (style.text or "").startswith(f"#llmtool-chart-{chart.name} *{{")


def test_ids_are_distinct_across_the_charts_of_a_page(full: list[Chart]) -> None:
    ids = [e.get("id") for chart in full for e in _parse(chart).iter() if e.get("id")]
    assert len(ids) == len(set(ids))


def test_the_same_report_gives_the_same_bytes(full: list[Chart]) -> None:
    assert charts(_full()) == full


def test_hostile_names_stay_escaped_text() -> None:
    pytest.importorskip("matplotlib")
    results = [_task(IMG, SCRIPT, True, tokens=[10, 20, 30], cost=0.01)]
    results += [_task("m", SCRIPT, False, i, tokens=[10, 20, 30], cost=0.01) for i in range(3)]
    scenarios = [_scenario(IMG, "s", 3, guidance=SCRIPT)]
    trials = {SCRIPT: {IMG: TrialSummary(trials=2, pass_at_k={1: 0.5})}}
    found = charts(_report(results, scenarios, trials=trials))
    assert len(found) == 6
    for chart in found:
        assert "<script" not in chart.svg and "<img" not in chart.svg
        for element in _parse(chart).iter():
            assert not element.tag.endswith(("script", "img", "foreignObject"))
            assert not any(name.lower().startswith("on") for name in element.attrib)
        assert any(SCRIPT in t or IMG in t for t in _texts(chart))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in found[0].svg


def test_math_and_odd_characters_in_names_are_plain_text() -> None:
    """`$` does not start math (and `$\\frac` would not crash); characters XML cannot hold
    are dropped; a script DejaVu Sans lacks warns of nothing."""
    pytest.importorskip("matplotlib")
    names = [r"$\frac{1}{2}$", "bad\x00\x1b\ufffename", "\u6587\u5b57"]
    results = [_task("m", name, True) for name in names]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        [bars, _] = charts(_report(results))
    assert {r"$\frac{1}{2}$", "badname", "\u6587\u5b57"} <= set(_texts(bars))


def test_many_categories_and_models_make_a_taller_chart() -> None:
    pytest.importorskip("matplotlib")
    few = _report([_task("m", "c", True)])
    many = _report(
        [
            _task(f"model-{m}", f"category-{c:02d}", (c + m) % 2 == 0)
            for m in range(4)
            for c in range(40)
        ]
    )

    def height(report: EvalReport) -> float:
        [bars] = [c for c in charts(report) if c.name == "pass_rate_by_category"]
        return float((_parse(bars).get("viewBox") or "").split()[3])

    assert height(many) > 10 * height(few)
    [bars] = [c for c in charts(many) if c.name == "pass_rate_by_category"]
    assert {f"category-{c:02d}" for c in range(40)} <= set(_texts(bars))


def test_a_model_keeps_its_colour_in_every_chart() -> None:
    pytest.importorskip("matplotlib")
    second = charts_module.PALETTE[1].lower()  # as matplotlib writes it
    results = [_task(m, "c", True, tool_calls=2) for m in ("first", "second")]
    bars, turns = charts(_report(results))
    assert second in bars.svg and second in turns.svg
    only_second = charts(_report([r for r in results if r.model == "second"]))
    # Its place among the run's models, not among what one chart shows, picks the colour.
    assert all(charts_module.PALETTE[0].lower() in c.svg for c in only_second)


def test_labels_are_one_short_line() -> None:
    assert label("a\n\tb  c") == "a b c"
    assert label("x" * 31) == "x" * 29 + "\u2026"
    assert label("x" * 30) == "x" * 30
    assert label("\x00") == "(none)"
    assert label("\u202eevil") == "evil"


class _CountedReads(list[TaskResult]):
    """Results that count the passes over them: a large run's are decoded as each is read."""

    passes = 0

    def __iter__(self) -> Iterator[TaskResult]:
        self.passes += 1
        return super().__iter__()


def test_the_charts_read_the_results_in_one_pass() -> None:
    pytest.importorskip("matplotlib")
    report = _full()
    report.results = counted = _CountedReads(report.results)
    found = _names(charts(report))
    assert "context_growth" in found and "turns_per_task" in found  # both read the traces
    assert counted.passes == 1


def test_tool_calls_count_bash_tasks_not_scenarios() -> None:
    """Issue 22: the chart said n=56 for 51 tasks, counting scenarios with them."""
    pytest.importorskip("matplotlib")
    results = [_task("m", "files", True, index=i, tool_calls=1) for i in range(3)]
    scenarios = [_scenario("m", f"s{i}", 4, tool_calls=9) for i in range(2)]
    [chart] = [c for c in charts(_report(results, scenarios)) if c.name == "turns_per_task"]
    assert chart.title == "Tool calls per bash task (n = 3 bash task runs)"
    assert "m (n=3)" in _texts(chart)
    assert not any(t.startswith("9") for t in _texts(chart))  # no scenario's 9 calls


def test_every_chart_says_its_n(full: list[Chart]) -> None:
    titles = {chart.name: chart.title for chart in full}
    # _full(): 2 models x 3 categories x 4 tasks, every one with tokens and a price;
    # 2 models x 2 guidance documents x 3 scenarios, each with gates; 4 tasks with trials
    # per model and 3 per optimization agent.
    assert titles == {
        "pass_rate_by_category": "Bash tasks passed by category (n = 24 bash task runs)",
        "context_growth": "Input tokens per model call (n = 24 runs with token counts)",
        "cost_vs_pass_rate": "Cost per task against pass rate (n = 24 priced runs)",
        "pass_at_k": "pass@k over repeated attempts (n = 4 tasks each)",
        "speedups": "Optimization: mean speedup per agent (n = 3 tasks each)",
        "turns_per_task": "Tool calls per bash task (n = 24 bash task runs)",
        "scenario_gates": "Scenario gates passed (n = 12 scenario runs with gates)",
    }
    for chart in full:  # the title is drawn, and named for screen readers
        assert chart.title in _texts(chart)
        assert _parse(chart).get("aria-label") == chart.title
