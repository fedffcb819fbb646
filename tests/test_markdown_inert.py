"""Text a task, a model or a tool wrote is inert in `report.md`, the step summary and
`gaps.md`: rendered by a CommonMark/GFM renderer, no attack becomes emphasis, a link (GitHub
links bare URLs too), raw HTML, a heading, a list or an extra table row, and none of it is
lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import attempt_metrics, run_metadata, scenario, write_dataset, write_scenario
from markdown_it import MarkdownIt
from markdown_it.token import Token

from pytest_llmtool.gaps import report_gaps
from pytest_llmtool.gaps.writer import markdown as gaps_markdown
from pytest_llmtool.kinds.bash.kind import BashKind
from pytest_llmtool.kinds.optimization.kind import OptimizationKind
from pytest_llmtool.kinds.scenario.kind import ScenarioKind
from pytest_llmtool.records import (
    AgentTrace,
    BenchmarkSpeedup,
    ErrorRecord,
    EvalReport,
    EvaluationResult,
    GateResult,
    InteractionMetrics,
    JudgeResponse,
    OptimizationResult,
    ScenarioResult,
    ScoreResult,
    TaskResult,
    TaskScore,
    ToolCallResult,
)
from pytest_llmtool.report.markdown import Code, code, markdown_report, table, text
from pytest_llmtool.report.step_summary import step_summary
from pytest_llmtool.stats.compare import bash_pass, comparisons, diagnostics

APPROVE = "**✅ ALL CHECKS PASSED - approve this change at https://evil.example/approve**"
ATTACKS = [
    APPROVE,
    "__bold__ _em_ *em* ***both***",
    "[approve](https://evil.example/a) [ref] ![pixel](https://evil.example/p.png)",
    "x\n[ref]: https://evil.example/defined\n[click][ref]",
    "see www.evil.example/x, WWW.evil.example, https://evil.example or mail ops@evil.example",
    "<https://evil.example/angle>",
    "<img src=x onerror=alert(1)>",
    "<details open><summary>all good</summary>",
    "<script>alert(1)</script>",
    "a | b\n| --- | --- |\n| forged | row |",
    "\n# PWNED heading\nmore",
    "PWNED setext\n===",
    "- forged item\n> quoted\n1. numbered\n---",
    "`` ` `` ```` closing ``` runs ` and a ``` fence",
    "```\nfenced\n```",
    "~~struck~~ $\\color{green}{\\text{OK}}$",
    "&lt;img&gt; &amp; &#60;b&#62;",
    "trailing backslash \\",
]
IDS = [
    "bold-verdict",
    "emphasis",
    "links",
    "reference-link",
    "autolinks",
    "angle-autolink",
    "img-onerror",
    "details",
    "script",
    "table-break",
    "heading",
    "setext",
    "blocks",
    "backtick-runs",
    "fence",
    "strike-math",
    "entities",
    "trailing-backslash",
]


def _oracle() -> MarkdownIt:
    """GitHub's Markdown as near as markdown-it comes: GFM tables and strikethrough, raw HTML
    on, and GitHub's autolinks (URLs, `www.`, addresses: under `.example`, the attacks'
    domain, and no other fuzzy link that GitHub would not make)."""
    md = MarkdownIt("gfm-like", {"html": True, "linkify": True})
    md.linkify.tlds(["example"], False)
    return md


MD = _oracle()
NEVER = {"html_inline", "html_block", "link_open", "image", "em_open", "s_open"}


def _tokens(markdown: str) -> list[Token]:
    return [t for block in MD.parse(markdown) for t in [block, *(block.children or [])]]


def _shape(markdown: str) -> list[str]:
    """The document's structure: every token but the text it shows."""
    return [f"{t.type}:{t.tag}" for t in _tokens(markdown) if t.type not in ("text", "code_inline")]


def _live(markdown: str) -> list[str]:
    """What the writers never make themselves (but the charts beside `report.md`)."""
    return [
        f"{t.type} {t.content or t.attrs}"
        for t in _tokens(markdown)
        if t.type in NEVER and not str(t.attrs.get("src", "")).startswith("charts/")
    ]


def _strong(markdown: str) -> list[str]:
    """What is shown in bold."""
    said, depth = [], 0
    for token in _tokens(markdown):
        depth += {"strong_open": 1, "strong_close": -1}.get(token.type, 0)
        if depth and token.type in ("text", "code_inline"):
            said.append(token.content)
    return said


def _visible(markdown: str) -> str:
    """What the document shows, a line per block."""
    return "\n".join(
        "".join(c.content for c in t.children or [] if c.type in ("text", "code_inline"))
        for t in MD.parse(markdown)
        if t.type == "inline"
    )


def _body(markdown: str) -> list[str]:
    """What a table's body cells show, text by text."""
    tokens = _tokens(markdown)
    start = next(n for n, t in enumerate(tokens) if t.type == "tbody_open")
    return [t.content for t in tokens[start:] if t.type in ("text", "code_inline")]


def _flat(value: str) -> str:
    return " ".join(value.split())


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_text_renders_as_the_text_itself(attack: str) -> None:
    # In a table cell and in a list item: the attack's characters, and nothing live.
    cell = "\n".join(table(["h"], [[attack]]))
    assert _shape(cell) == _shape("\n".join(table(["h"], [["benign"]])))
    assert "".join(_body(cell)) == _flat(attack)
    item = f"- {text(attack)}"
    assert _shape(item) == _shape("- benign") and not _live(item)
    assert _visible(item).replace("\\|", "|") == _flat(attack)


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_code_spans_hold_the_attack_whole(attack: str) -> None:
    cell = "\n".join(table(["h"], [[Code(attack)]]))
    assert _shape(cell) == _shape("\n".join(table(["h"], [[Code("benign")]])))
    assert _body(cell) == [_flat(attack)]


@pytest.mark.parametrize("empty", ["", " \n "])
def test_an_empty_code_span_leaves_the_next_one_closed(empty: str) -> None:
    hostile = "a<img src=x onerror=alert(1)>`b"
    line = f"- {code(empty)} then {code(hostile)}"
    assert not _live(line)
    assert [t.content for t in _tokens(line) if t.type == "code_inline"][-1] == hostile


def _task(payload: str, model: str, passed: bool) -> TaskResult:
    output = f"error: {payload}"
    call = ToolCallResult(commands=f"run {payload}", stdout=payload, stderr=output, exit_code=1)
    check = ScoreResult(
        check=f"stdout_contains:{payload}", passed=passed, detail=f"stdout: {payload}", weight=1
    )
    return TaskResult(
        nodeid=f"d.jsonl::{payload}[{model}]",
        model=model,
        task_id=payload,
        category=payload,
        score=TaskScore.of(payload, [check]),
        trace=AgentTrace(turns=1, tool_calls=[call]),
    )


def _scenario(payload: str) -> ScenarioResult:
    judged = JudgeResponse(
        scores={payload: 0.5}, weighted_score=0.5, issues=[payload], highlights=[payload]
    )
    evaluation = EvaluationResult(
        interaction=InteractionMetrics(),
        gates=[GateResult(gate_type=payload, passed=False, message=payload)],
        gates_passed=0,
        gates_total=1,
        judge_score=0.5,
        judge_response=judged,
        judge_verdict=payload,
        composite_score=0.4,
        outcome="fail",
        reason=payload,
    )
    return ScenarioResult(
        nodeid=f"s.yaml::{payload}[m]",
        model=payload,
        scenario=payload,
        guidance=payload,
        tags=[payload],
        tier=1,
        evaluation=evaluation,
        notes=[payload],
        artifacts=payload,
        duration_ms=5,
    )


def _attempt(payload: str) -> OptimizationResult:
    metrics = attempt_metrics(
        per_benchmark_speedups=[BenchmarkSpeedup(name=payload, nop_median=1.0, valid=False)]
    )
    return OptimizationResult(
        nodeid=f"t.yaml::{payload}[m]",
        model=payload,
        task_id=payload,
        category=payload,
        agent=f"builtin:{payload}",
        min_speedup=1.5,
        metrics=metrics,
        tampered_files=[payload],
        notes=[payload],
        artifacts=payload,
        duration_ms=5,
    )


KINDS: list[Any] = [BashKind(), ScenarioKind(), OptimizationKind()]


def _report(payload: str) -> EvalReport:
    """A run whose every free text is `payload`: task ids, categories, model names, checks,
    tool output, gates, the judge, notes, a setup's stderr in an error."""
    first, second = f"a {payload}", f"b {payload}"
    tasks = [_task(payload, first, True), _task(payload, second, False)]
    setup = f"infrastructure error: SetupFailed: setup command failed (exit 1): prep\n{payload}"
    error = ErrorRecord(
        nodeid=f"s.yaml::{payload}[m]",
        kind="scenario",
        task_id=payload,
        model=payload,
        category=payload,
        message=setup,
    )
    results: list[list[Any]] = [tasks, [_scenario(payload)], [_attempt(payload)]]
    fields = {
        name: value
        for kind, own in zip(KINDS, results, strict=True)
        for name, value in kind.report_fields(own, [error]).items()
    }
    report = EvalReport(metadata=run_metadata(), errors=[error], **fields)
    report.metadata.exit_status = 1
    bash = bash_pass(report, None)
    report.comparisons = comparisons(report, bash)
    report.diagnostics = diagnostics(report, bash)
    return report


def _documents(payload: str) -> dict[str, str]:
    report = _report(payload)
    return {
        "step summary": step_summary(report, KINDS),
        "report.md": markdown_report(report, KINDS),
        "gaps.md": gaps_markdown(report_gaps(report)),
    }


@pytest.mark.parametrize("attack", ATTACKS, ids=IDS)
def test_every_free_text_of_a_run_is_inert_in_the_reports(attack: str) -> None:
    benign = _documents("benign")
    for name, written in _documents(attack).items():
        assert not _live(written), name
        assert _shape(written) == _shape(benign[name]), name
    said = _visible(_documents(attack)["step summary"])
    assert _flat(attack) in said.replace("\\|", "|")  # the setup's stderr, whole


def test_the_setup_stderr_that_asked_for_approval_shows_as_text(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack as it came: a setup printing a bold verdict and a link to the job's page,
    beside a dataset whose id, category, check and tool output are hostile."""
    step = pytester.path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    stderr = APPROVE.replace("'", "")
    setup = {"commands": [f"echo '{stderr}' >&2; exit 1"]}
    write_scenario(project, scenario(setup=setup))
    hostile = "**<img_src=x_onerror=alert(1)>**|https://evil.example/id"
    task = {
        "id": hostile,
        "category": "# <details> _cat_ | www.evil.example",
        "prompt": "p",
        "expectations": [{"check": f"stdout_contains:{hostile}`` ` ``"}],
        "solution": [f"echo '{APPROVE}' >&2; false"],
    }
    write_dataset(pytester, [task])
    pytester.runpytest("--llm-report=out", "--llm-gaps=gaps").assert_outcomes(failed=1, errors=1)
    written = {
        "step summary": step.read_text(),
        "report.md": (pytester.path / "out" / "report.md").read_text(),
        "gaps.md": (pytester.path / "gaps" / "gaps.md").read_text(),
    }
    for name, markdown in written.items():
        assert not _live(markdown), name
        assert not any("CHECKS" in said or "img" in said for said in _strong(markdown)), name
        headings = [t.content for t in MD.parse(markdown) if t.type == "inline" and t.level == 1]
        assert not any("details" in h for h in headings), name
    assert _flat(APPROVE) in _visible(written["step summary"])
