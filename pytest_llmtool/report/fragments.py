"""HTML fragments of one item for the pytest-html report: tables, the conversation, folds.

Everything shown comes from a model, a tool, or a task file, so every value goes through
`html.escape` here and nowhere is text put into markup unescaped: pytest-html inserts an
extra's HTML as it is. Long text is folded (`<details>`, closed, with its size in the summary
line) and cut at `TEXT_LIMIT` characters, so that a run of thousands of items stays a page a
browser opens; `report.json` keeps every byte.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence

from pytest_llmtool.inputs.untrusted import escaped
from pytest_llmtool.records import (
    AgentTrace,
    GateResult,
    JudgeResponse,
    LLMCallMetrics,
    ModelParams,
    ModelSetup,
    ReasoningBlock,
    ReasoningContent,
    RedactedThinkingBlock,
    ScoreResult,
    TextBlock,
    ThinkingBlock,
    ToolCallResult,
    ToolUseBlock,
)
from pytest_llmtool.report.costs import cost_cell
from pytest_llmtool.report.trace_view import agent_line

TEXT_LIMIT = 4000  # characters of one text shown in the report
CUT_CALL = "Tool call not run: the reply was cut at max_tokens, its arguments may be cut"


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def size(text: str | int) -> str:
    """A text's (or a byte count's) size as a person reads it: 812 B, 4.1 KB, 2.3 MB."""
    n = text if isinstance(text, int) else len(text.encode("utf-8", "replace"))
    if n < 1000:
        return f"{n} B"
    return f"{n / 1000:.1f} KB" if n < 1_000_000 else f"{n / 1_000_000:.1f} MB"


def pre(text: str) -> str:
    """Preformatted text, cut at `TEXT_LIMIT` with a note of how much is left out."""
    shown = text[:TEXT_LIMIT]
    cut = len(text) - len(shown)
    note = f'\n<span class="llm-cut">… {cut:,} more characters in report.json</span>' if cut else ""
    return f"<pre>{esc(shown)}{note}</pre>"


def fold(summary: str, body: str, *, section: str = "", is_open: bool = False) -> str:
    """A `<details>` element; `summary` is markup already made safe by the caller."""
    data = f' data-section="{esc(section)}"' if section else ""
    opened = " open" if is_open else ""
    return f'<details class="llm-fold"{data}{opened}><summary>{summary}</summary>{body}</details>'


def open_section(sections: str, section: str) -> str:
    """`sections` with the fold of `section` open. Only our markup can hold the fold's tag:
    text from a model or a tool is escaped, so its `<` never starts one."""
    closed = f'<details class="llm-fold" data-section="{esc(section)}">'
    return sections.replace(closed, closed[:-1] + " open>", 1)


def params_text(params: ModelParams) -> str:
    """`temperature 0.3, max tokens 4096`; the provider's default where none was sent."""
    temperature = "default" if params.temperature is None else f"{params.temperature:g}"
    tokens = "default" if params.max_tokens is None else str(params.max_tokens)
    return f"temperature {temperature}, max tokens {tokens}"


def setup_anchor(key: str) -> str:
    return f"llm-setup-{esc(key)}"


def setup_line(trace: AgentTrace) -> str:
    """An item's one line on what its model was given, linking to the run's copy of it."""
    given = trace.given
    if trace.setup is None or given is None:
        return ""
    tools = ", ".join(t.name for t in given.tools) or "none"
    said = f"system prompt {size(given.system)}, tools: {tools}; {params_text(given.params)}"
    link = f'<a href="#{setup_anchor(trace.setup)}">setup {esc(trace.setup)}</a>'
    return f'<p class="llm-setup-line">Model given: {link}: {esc(said)}</p>'


def agent_said(trace: AgentTrace) -> str:
    """An item's one line on the agent CLI that ran it (`trace_view.agent_line`: name and
    version, network, which cost); '' for the built-in loop."""
    said = agent_line(trace)
    return f'<p class="llm-agent-line">{esc(said)}</p>' if said else ""


def setup(key: str, given: ModelSetup) -> str:
    """One setup of the run in full: the parameters, the system prompt, each tool."""
    tools = "".join(
        f"<p><b>{esc(t.name)}</b></p>{pre(t.description)}"
        f"{pre(json.dumps(t.input_schema, indent=2, ensure_ascii=False))}"
        for t in given.tools
    )
    body = (
        f"<p>{esc(params_text(given.params))}</p><p><b>System prompt</b></p>{pre(given.system)}"
        f"<p><b>Tools</b> ({len(given.tools)})</p>{tools}"
    )
    return f'<div class="llm-setup" id="{setup_anchor(key)}"><h3>Setup {esc(key)}</h3>{body}</div>'


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, marks: bool = False) -> str:
    """A table of escaped cells; with `marks`, a cell of True/False shows as PASS/FAIL."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(value, marks) for value in row) + "</tr>" for row in rows)
    return f'<table class="llm-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _cell(value: object, marks: bool) -> str:
    if marks and isinstance(value, bool):
        return f'<td class="llm-{"pass" if value else "fail"}">{"PASS" if value else "FAIL"}</td>'
    return f"<td>{esc('' if value is None else value)}</td>"


def checks(results: Sequence[ScoreResult]) -> str:
    passed = sum(r.passed for r in results)
    rows = [(r.passed, escaped(r.check), r.weight, escaped(r.detail)) for r in results]
    body = table(["Result", "Check", "Weight", "Detail"], rows, marks=True)
    return fold(f"Checks: {passed}/{len(results)} passed", body, section="checks", is_open=True)


def gates(results: Sequence[GateResult]) -> str:
    passed = sum(g.passed for g in results)
    body = table(
        ["Result", "Gate", "Detail"],
        [(g.passed, g.gate_type, escaped(g.message)) for g in results],
        marks=True,
    )
    return fold(f"Gates: {passed}/{len(results)} passed", body, section="gates", is_open=True)


def judge(response: JudgeResponse | None, score: float | None, verdict: str | None) -> str:
    """The judge's score, verdict, per-criterion scores, rationale, prescriptiveness and
    adjusted score, issues and highlights."""
    said = [f"<p>Score {esc(f'{score:.2f}' if score is not None else 'none')}"]
    if verdict:
        said.append(f"; verdict: {esc(verdict)}")
    said.append("</p>")
    if response is not None:
        said.append(table(["Criterion", "Score"], sorted(response.scores.items())))
        if response.rationale:
            said.append(f"<p>Rationale: {esc(response.rationale)}</p>")
        if rated := prescriptiveness(response):
            said.append(f"<p>{esc(rated)}</p>")
        for title, entries in (("Issues", response.issues), ("Highlights", response.highlights)):
            if entries:
                items = "".join(f"<li>{esc(e)}</li>" for e in entries)
                said.append(f"<p>{title}:</p><ul>{items}</ul>")
    return fold("Judge", "".join(said), section="judge", is_open=True)


def prescriptiveness(response: JudgeResponse) -> str:
    """The judge's prescriptiveness rating and the adjusted score it gives, in one line ("" when
    the judge gave none)."""
    rated = response.prescriptiveness
    if rated is None:
        return ""
    why = f" ({rated.rationale})" if rated.rationale else ""
    adjusted = response.adjusted_score
    shown = f"; adjusted score {adjusted:.2f} (informational)" if adjusted is not None else ""
    return f"Prescriptiveness {rated.level}/3{why}{shown}"


def stop_cell(m: LLMCallMetrics) -> str:
    """Why a reply ended: the neutral kind, with the provider's word where it differs."""
    if m.stop is None or m.stop_reason in (None, m.stop):
        return m.stop or m.stop_reason or ""
    return f"{m.stop} ({m.stop_reason})"


def calls(metrics: Sequence[LLMCallMetrics]) -> str:
    """Seed 003's per-call metrics: tokens (of the output, those spent reasoning), cache,
    latency and time to first token, the growing context, and why each reply ended."""
    rows = [
        (
            m.call_number,
            m.input_tokens if m.usage_reported else "not reported",
            m.output_tokens if m.usage_reported else "not reported",
            "" if m.reasoning_tokens is None else m.reasoning_tokens,
            m.cache_read_tokens,
            m.cache_write_tokens,
            f"{m.latency_ms:.0f}",
            "" if m.ttft_ms is None else f"{m.ttft_ms:.0f}",
            m.cumulative_input,
            m.tool_calls_made,
            m.retries,
            stop_cell(m),
            cost_cell(m.cost_usd, bool(m.input_tokens + m.output_tokens)),
        )
        for m in metrics
    ]
    headers = [
        "Call",
        "Input",
        "Output",
        "Reasoning",
        "Cache read",
        "Cache write",
        "Latency ms",
        "First token ms",
        "Cumulative input",
        "Tool calls",
        "Retries",
        "Stop",
        "Cost",
    ]
    return fold(f"LLM calls: {len(metrics)}", table(headers, rows), section="calls")


def tool_call(call: ToolCallResult) -> str:
    """One bash invocation: its command, exit code, and its output folded with sizes."""
    status = "ok" if call.exit_code == 0 else "error"
    parts = [
        f'<div class="llm-call llm-{status}"><span class="llm-exit">exit {call.exit_code}</span>',
        pre(call.commands),
    ]
    for name, text in (("stdout", call.stdout), ("stderr", call.stderr)):
        if text:
            parts.append(fold(f"{name} ({size(text)})", pre(text)))
    return "".join(parts) + "</div>"


def reasoning(block: ThinkingBlock | RedactedThinkingBlock | ReasoningBlock) -> str:
    """A model's thinking, folded; redacted thinking marked as such. Encrypted reasoning is
    opaque and long: only its presence is said."""
    if isinstance(block, RedactedThinkingBlock):
        return '<div class="llm-turn llm-thinking"><i>Thinking redacted by the provider</i></div>'
    if isinstance(block, ThinkingBlock):
        body = pre(block.thinking)
        title = f"Thinking ({size(block.thinking)})"
    else:
        body = "".join(pre(text) for text in block.summary)
        encrypted = " + encrypted reasoning, not shown" if block.encrypted_content else ""
        title = f"Reasoning summary ({size(''.join(block.summary))}{encrypted})"
    return f'<div class="llm-turn llm-thinking">{fold(esc(title), body)}</div>'


def conversation(trace: AgentTrace) -> str:
    """The prompt, each model reply and each tool call, in order; folded, with its size.

    Tool calls are paired with tool-use blocks in the order both were made; calls a trace
    has without messages (an external agent's log) are listed on their own."""
    calls_left = iter(trace.tool_calls)
    turns: list[str] = []
    total = sum(len(b.text) for m in trace.messages for b in m.content if isinstance(b, TextBlock))
    total += sum(len(c.commands) + len(c.stdout) + len(c.stderr) for c in trace.tool_calls)
    for message in trace.messages:
        for block in message.content:
            if isinstance(block, ReasoningContent):
                turns.append(reasoning(block))
            elif isinstance(block, TextBlock) and block.text:
                who = "Prompt" if message.role == "user" else "Model"
                turns.append(
                    f'<div class="llm-turn llm-{message.role}"><b>{who}</b>{pre(block.text)}</div>'
                )
            elif isinstance(block, ToolUseBlock):
                call = next(calls_left, None)
                if call is not None:
                    turns.append(tool_call(call))
                elif trace.stop == "max_tokens":
                    turns.append(
                        f'<div class="llm-call llm-error">{esc(CUT_CALL)}{pre(str(block.input))}'
                        "</div>"
                    )
    turns += [tool_call(call) for call in calls_left]
    said = trace.agent.final_text.strip() if trace.agent is not None else ""
    replied = next((m.text() for m in reversed(trace.messages) if m.role == "assistant"), "")
    if said and said != replied.strip():  # an agent CLI's result, when its stream differs
        turns.append(f'<div class="llm-turn llm-final"><b>Final text</b>{pre(said)}</div>')
    ended = f"; ended: {trace.stop}" if trace.stop else ""
    summary = (
        f"Conversation: {trace.turns} turns, {len(trace.tool_calls)} tool calls ({size(total)})"
        f"{esc(ended)}"
    )
    return fold(summary, "".join(turns), section="conversation")
