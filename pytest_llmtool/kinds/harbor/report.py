"""Harbor tasks in the reports: why an item failed, its details (rewards, steps, phases, the
container), and the per-model summary with every reward key, terminal and Markdown alike."""

from __future__ import annotations

import json
from collections.abc import Iterable

from pytest_llmtool.inputs.untrusted import escaped, shorten
from pytest_llmtool.kinds import Columns
from pytest_llmtool.kinds.harbor import variant_summary
from pytest_llmtool.kinds.harbor.summary import PHASES, failure_reason, phase_ms
from pytest_llmtool.records import EvalReport, HarborResult, HarborSummary
from pytest_llmtool.report import fragments
from pytest_llmtool.report.costs import cost_cell
from pytest_llmtool.report.markdown import code, table, text
from pytest_llmtool.report.terminal import format_table
from pytest_llmtool.stats.intervals import SMALL_NOTE, any_small, show

# Lines of the verifier's output shown under a failure.
OUTPUT_LINES = 12
LEGEND = (
    "Passed: the item's reward (the `reward` key unless the task names another) reached its "
    "threshold (1.0 unless set); a missing or bad reward file is a graded failure.",
    "Each reward key: its mean [95% interval] over tasks, among the items whose rewards hold "
    "it (n); items without it are counted apart, not as 0.",
)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _rewards_text(r: HarborResult) -> str:
    if r.rewards is None:
        return "none"
    return ", ".join(f"{k}={v:g}" for k, v in sorted(r.rewards.items())) or "{}"


def failure_line(r: HarborResult) -> str:
    """The one line saying why a graded item failed, naming the numbers."""
    reason = failure_reason(r)
    source = f" ({r.reward_source})" if r.reward_source else ""
    if reason == "trajectory":
        broken = next(g for g in r.trajectory if not g.passed)
        return f"{escaped(broken.identifier)} failed: {escaped(broken.message)}"
    if reason == "below threshold":
        assert r.rewards is not None
        return f"{r.reward_key} {r.rewards[r.reward_key]:g} < {r.threshold:g}{source}"
    if reason == "no reward key":
        assert r.rewards is not None
        keys = ", ".join(sorted(r.rewards)) or "none"
        return f"the rewards have no {r.reward_key!r} key{source} (they have: {keys})"
    if reason == "reward not a number":
        value = shorten(json.dumps(r.details[r.reward_key]), 80)
        return f"{r.reward_key!r} in {r.reward_source} is not a number: {value}"
    if r.reward_error:
        return f"no reward: {r.reward_error}"
    if r.exception_info is not None:
        info = r.exception_info
        return f"no reward: {info.exception_type}: {shorten(info.exception_message, 200)}"
    return "no reward: the verifier gave none"


def failure(r: HarborResult) -> str:
    """Why the item failed: the decision first, then the agent's timeout or exit, the steps,
    and the verifier's last lines."""
    lines = [failure_line(r)]
    if r.agent_timed_out:
        lines.append("the agent timed out (the verifier ran on what it left)")
    if r.agent_exit_code not in (None, 0):
        lines.append(f"the agent exited with status {r.agent_exit_code}")
    if r.exception_info is not None and r.rewards is not None:
        lines.append(f"{r.exception_info.exception_type}: {r.exception_info.exception_message}")
    for step in r.steps:
        said = step.reward_error or (
            ", ".join(f"{k}={v:g}" for k, v in sorted((step.rewards or {}).items())) or "-"
        )
        lines.append(f"step {step.step_name}: {said}")
    lines += [f"{escaped(g.identifier)}: {escaped(g.message)}" for g in r.trajectory if g.passed]
    if r.verifier_output:
        tail = r.verifier_output.rstrip("\n").splitlines()[-OUTPUT_LINES:]
        lines += ["verifier output (last lines):", *(f"  {escaped(line)}" for line in tail)]
    return "\n".join(lines)


def properties(r: HarborResult) -> list[tuple[str, object]]:
    """JSON-native `user_properties` of a finished item."""
    return [
        ("model", r.model),
        ("task", r.task_id),
        ("agent", r.agent),
        ("variant", r.variant),
        ("trial", r.trial),
        ("passed", r.passed),
        ("reward", r.reward),
        ("rewards", r.rewards),
        ("reward_source", r.reward_source),
        ("reward_error", r.reward_error),
        ("agent_timed_out", r.agent_timed_out),
        ("duration_ms", r.duration_ms),
    ]


def columns(r: HarborResult) -> Columns:
    """The reward in the Score column (`-` without one)."""
    trace, usage = r.trace, r.agent_result
    tokens = None
    if usage is not None and usage.n_input_tokens is not None and usage.n_output_tokens is not None:
        tokens = usage.n_input_tokens + usage.n_output_tokens
    elif trace is not None:
        tokens = trace.total_input_tokens + trace.total_output_tokens
    return Columns(
        score=r.reward,
        score_text=_num(r.reward),
        turns=trace.turns if trace else None,
        calls_ok=trace.tool_calls_ok if trace else None,
        calls_error=trace.tool_calls_error if trace else None,
        tokens=tokens,
        cost_usd=usage.cost_usd if usage is not None else (trace.cost_usd if trace else None),
    )


def _timing_rows(r: HarborResult) -> list[list[str]]:
    rows = []
    for phase in PHASES:
        took = phase_ms(getattr(r, phase))
        rows.append([phase, "-" if took is None else f"{took / 1000:.2f} s"])
    return rows


def html_details(r: HarborResult) -> list[str]:
    """Rewards and the decision, steps, phase times, the container, the verifier's output,
    then the agent's conversation when it had one."""
    outcome = "passed" if r.passed else f"failed: {failure_line(r)}"
    said = [
        f"<p>Reward {fragments.esc(r.reward_key)} = {fragments.esc(_num(r.reward))} against "
        f"{r.threshold:g}: {fragments.esc(outcome)}</p>",
        fragments.table(
            ["Reward", "Value"], sorted((k, f"{v:g}") for k, v in (r.rewards or {}).items())
        ),
        f"<p>From {fragments.esc(r.reward_source or 'no reward file')}"
        + (f"; {fragments.esc(r.reward_error)}" if r.reward_error else "")
        + "</p>",
    ]
    if r.details:
        said.append(fragments.pre(json.dumps(r.details, indent=2, ensure_ascii=False)))
    if r.agent_timed_out or r.agent_exit_code not in (None, 0):
        said.append(
            f"<p>Agent: {'timed out; ' if r.agent_timed_out else ''}"
            f"exit status {fragments.esc(r.agent_exit_code)}</p>"
        )
    if r.exception_info is not None:
        info = r.exception_info
        said.append(fragments.pre(f"{info.exception_type}: {info.exception_message}"))
    parts = [fragments.fold("Rewards", "".join(said), section="rewards", is_open=True)]
    if r.steps:
        rows = [
            [
                s.step_name,
                ", ".join(f"{k}={v:g}" for k, v in sorted((s.rewards or {}).items())) or "-",
                s.reward_source or "-",
                s.reward_error or "",
                "timed out" if s.agent_timed_out else str(s.agent_exit_code or 0),
            ]
            for s in r.steps
        ]
        body = fragments.table(["Step", "Rewards", "From", "Error", "Agent"], rows)
        parts.append(fragments.fold("Steps", body, section="steps"))
    body = fragments.table(["Phase", "Time"], _timing_rows(r))
    if r.container is not None:
        c = r.container
        limits = ", ".join(
            f"{k}={v:g} ({c.limits_enforced.get(k, '?')})" for k, v in sorted(c.limits.items())
        )
        body += fragments.table(
            ["Engine", "Image", "Image id", "Network", "Limits"],
            [[c.engine, c.image + (" (built)" if c.built else ""), c.image_id, c.network, limits]],
        )
    parts.append(fragments.fold("Trial", body, section="trial"))
    if r.verifier_output:
        parts.append(fragments.fold("Verifier output", fragments.pre(r.verifier_output)))
    if r.trace is not None:
        parts += [fragments.conversation(r.trace), fragments.calls(r.trace.llm_calls)]
    return parts


# --- the run's summary ---------------------------------------------------------------------


def _counts(found: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(found.items())) or "-"


def _tokens(s: HarborSummary) -> str:
    if s.input_tokens is None or s.output_tokens is None:
        return f"unknown ({s.tokens_known}/{s.items} known)"
    return f"{s.input_tokens + s.output_tokens:,}"


def summary_rows(report: EvalReport) -> tuple[list[str], list[list[str]]]:
    """One row per model (and variant): passes, rate, failures, errors, tokens, cost."""
    headers = ["Model", "Passed", "Pass rate [95% CI]", "Failures", "Errors", "Tokens", "Cost"]
    rows = [
        [
            name,
            f"{s.passed}/{s.items}",
            show(s.pass_rate_ci),
            _counts(s.failures),
            _counts(s.errors),
            _tokens(s),
            cost_cell(s.cost_usd),
        ]
        for name, s in report.harbor.items()
    ]
    return headers, rows


def metric_rows(report: EvalReport) -> tuple[list[str], list[list[str]]]:
    """Every reward key of every model: n, missing, mean [95% CI], range."""
    headers = ["Model", "Reward key", "n", "Missing", "Mean [95% CI]", "Min", "Max"]
    rows = []
    for name, s in report.harbor.items():
        for key, m in s.metrics.items():
            interval = m.interval
            mean = _num(m.mean)
            if interval is not None:
                small = "*" if interval.small else ""
                mean += f" [{interval.low:.3g}, {interval.high:.3g}]{small}"
            rows.append([name, key, str(m.n), str(m.missing), mean, _num(m.min), _num(m.max)])
    return headers, rows


def phase_rows(report: EvalReport) -> tuple[list[str], list[list[str]]]:
    headers = ["Model", *PHASES]
    rows = [
        [name, *(f"{s.phase_ms[p] / 1000:.2f} s" if p in s.phase_ms else "-" for p in PHASES)]
        for name, s in report.harbor.items()
    ]
    return headers, rows


def _small(report: EvalReport) -> bool:
    found = [s.pass_rate_ci for s in report.harbor.values()]
    found += [m.interval for s in report.harbor.values() for m in s.metrics.values()]
    return any_small(found)


def screen_lines(report: EvalReport, width: int) -> list[str]:
    """Per model: passes with the rate's interval, failures and errors, tokens, headed as the
    other kinds' one-screen tables are (the kind in the first header, `Pass rate`). The
    failure and error columns come only when an item has one; cost is the headline's."""
    if not report.harbor:
        return []
    headers, rows = summary_rows(report)
    keep = [
        i
        for i, header in enumerate(headers[:-1])
        if header not in ("Failures", "Errors") or any(row[i] != "-" for row in rows)
    ]
    headers = ["Harbor tasks", "Passed", "Pass rate", *headers[3:]]
    lines = format_table(
        [headers[i] for i in keep], [[row[i] for i in keep] for row in rows], width=width
    )
    return lines + (
        [SMALL_NOTE] if any_small(s.pass_rate_ci for s in report.harbor.values()) else []
    )


def terminal_lines(report: EvalReport) -> list[str]:
    if not report.harbor:
        return []
    lines = ["Harbor tasks:", *format_table(*summary_rows(report))]
    lines += ["", "Rewards:", *format_table(*metric_rows(report), left=2)]
    lines += ["", "Mean phase times:", *format_table(*phase_rows(report))]
    lines += [SMALL_NOTE] if _small(report) else []
    return [*lines, *LEGEND, *variant_summary.terminal_lines(report)]


def markdown_summary(report: EvalReport) -> list[str]:
    if not report.harbor:
        return []
    lines = ["", "## Harbor tasks", "", *table(*summary_rows(report)), ""]
    lines += ["### Rewards", "", *table(*metric_rows(report)), ""]
    lines += ["### Mean phase times", "", *table(*phase_rows(report)), ""]
    lines += [text(SMALL_NOTE), ""] if _small(report) else []
    lines += [*(f"- {text(line)}" for line in LEGEND), ""]
    return [*lines, *variant_summary.markdown_lines(report)]


def _detail_lines(r: HarborResult) -> Iterable[str]:
    outcome = "PASS" if r.passed else "FAIL"
    trial = f" t{r.trial + 1}" if r.trial else ""
    yield f"### {text(r.task_id)}{trial} [{text(r.model)}]: {outcome}"
    yield ""
    yield f"- Rewards: {code(_rewards_text(r))}" + (
        f" from {code(r.reward_source)}" if r.reward_source else ""
    )
    if not r.passed:
        yield f"- Why: {text(failure_line(r))}"
    if r.details:
        yield f"- Details: {', '.join(code(k) for k in sorted(r.details))}"
    if r.agent_timed_out:
        yield "- The agent timed out"
    for step in r.steps:
        said = step.reward_error or ", ".join(
            f"{k}={v:g}" for k, v in sorted((step.rewards or {}).items())
        )
        yield f"- Step {text(step.step_name)}: {text(said or '-')}"
    if r.container is not None:
        yield f"- Image {code(r.container.image)}, network {code(r.container.network)}"
    if r.artifacts:
        yield f"- Artifacts: {code(r.artifacts)}"
    yield ""


def markdown_details(report: EvalReport) -> Iterable[str]:
    if not report.harbor_results:
        return
    yield "## Harbor Details"
    yield ""
    for r in report.harbor_results:
        yield from _detail_lines(r)
