"""`report.md`: the document, and the helpers every kind's sections are written with.

Task text, model output and tool output are hostile input here (the step summary is written
with these helpers too): many Markdown viewers render raw HTML, and GitHub links bare URLs. So
every value is written inert, on one line: `text` escapes HTML, backslashes the syntax of
emphasis, strikethrough, math, links, images, code and cells and whatever would open a block at
a line's start, and shows the words GitHub would link (a URL, `www.`, an address) as code
spans, which it never links; `code` makes a code span that nothing inside can close.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pytest_llmtool.records import BaselineComparison, EvalReport, RunMetadata
from pytest_llmtool.report.comparisons import (
    comparison_rows,
    comparisons_small,
    diagnostic_findings,
    flips,
    multiplicity_note,
    uncompared_note,
)
from pytest_llmtool.report.costs import cost_notes
from pytest_llmtool.report.exit_status import exit_line
from pytest_llmtool.report.figures import model_figures
from pytest_llmtool.report.headline import headline_lines
from pytest_llmtool.report.terminal import judge_saved_line
from pytest_llmtool.stats import baseline
from pytest_llmtool.stats.intervals import SMALL_NOTE
from pytest_llmtool.stats.trials import flaky_entries, left_out_notes, trial_rows

if TYPE_CHECKING:
    from pytest_llmtool.kinds import Kind


# Inline syntax: escapes, code, emphasis (`_` only where it could open or close one: between
# two letters or digits it cannot), strikethrough, math (GitHub's `$`), links, table cells.
_SYNTAX = re.compile(r"([\\`*~$\[\]|]|_(?:(?![^\W_])|(?<![^\W_]_)))")
# What opens a block at a line's start (a heading, a setext underline, a list item, a rule):
# callers start lines and list items with text.
_BLOCK = re.compile(r"(\d{0,9})((?<!\d)(?:[#=]|[-+](?=\s|$)|-(?=[-\s]*$))|(?<=\d)[.)](?=\s|$))")
# What GitHub links in plain text (`http://`, `https://` and `www.` URLs, e-mail addresses,
# and `@name`, a mention): a word holding one is shown as code, which GitHub never links.
_LINKED = re.compile(r"://|www\.|@", re.IGNORECASE)
_TICKS = re.compile(r"`+")


class Code(str):
    """A table cell to show as code rather than as text."""


def text(value: object) -> str:
    """Untrusted text as inert Markdown on one line: no HTML, emphasis, links (bare URLs
    included), images, headings, lists, code or cells; every character still shown."""
    shown = str(value)
    return _short(shown) if len(shown) <= _SHORT else _inert(shown)


def _inert(value: str) -> str:
    flat = " ".join(value.split())
    shown: list[str] = []
    start = 0
    for found in _LINKED.finditer(flat) if _may_link(flat) else ():
        if found.start() < start:
            continue  # in the word just shown as code
        begin = flat.rfind(" ", 0, found.start()) + 1
        end = flat.find(" ", found.end()) % (len(flat) + 1)  # -1: to the end
        # a sentence's punctuation after the word stays outside, so a copied URL is the URL
        end = max(found.end(), begin + len(flat[begin:end].rstrip(":.,;)")))
        shown += [_escaped(flat[start:begin]), code(flat[begin:end])]
        start = end
    shown.append(_escaped(flat[start:]))
    out = "".join(shown)
    opens = _BLOCK.match(out)
    return out if opens is None else f"{opens[1]}\\{out[opens.end(1) :]}"


def _may_link(flat: str) -> bool:
    """What `_LINKED` looks for, tested cheaply first: most texts have none of it."""
    return "://" in flat or "@" in flat or "www." in flat.lower()


def _escaped(value: str) -> str:
    return _SYNTAX.sub(r"\\\1", html.escape(value, quote=False))


# A large report repeats its models, categories, checks and verdicts in every task's section:
# short texts are escaped once (long ones, such as command output, are rarely repeated).
_SHORT = 120
_short = lru_cache(maxsize=4096)(_inert)


def code(value: object) -> str:
    """A code span (its content is never HTML) fenced longer than any backtick run inside.
    Padded when empty: a bare "``" would open a span that a later fence on the line closes."""
    inner = " ".join(str(value).split()).replace("|", "\\|")
    fence = "`" * (max((len(run) for run in _TICKS.findall(inner)), default=0) + 1)
    pad = " " if not inner or inner.startswith("`") or inner.endswith("`") else ""
    return f"{fence}{pad}{inner}{pad}{fence}"


def _cell(value: str) -> str:
    return code(value) if isinstance(value, Code) else text(value)


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = [*_head(tuple((h, isinstance(h, Code)) for h in headers))]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


@lru_cache(maxsize=256)
def _head(headers: tuple[tuple[str, bool], ...]) -> tuple[str, str]:
    """A table's header and rule lines (cached: every task's table has the same)."""
    cells = (code(h) if as_code else text(h) for h, as_code in headers)
    return "| " + " | ".join(cells) + " |", "|" + "|".join("---" for _ in headers) + "|"


def markdown_lines(
    report: EvalReport,
    kinds: Sequence[Kind[Any, Any]],
    charts: Sequence[tuple[str, str]] = (),
    charts_failed: str | None = None,
    details: Mapping[str, Iterable[str]] | None = None,
) -> Iterator[str]:
    """The metadata, each kind's summary sections, the errors, the charts (title, relative
    path of an SVG written beside, or why there are none), then each kind's details, line by
    line: the details of a large run are written as they are made (or as `details` has them,
    by kind name, made along the summaries' pass)."""
    yield from ["# pytest-llmtool eval report", "", *head_lines(report)]
    yield from metadata_lines(report.metadata)
    yield from summary_lines(report, kinds)
    if charts_failed:
        yield from ["## Charts", "", text(charts_failed), ""]
    if charts:
        yield from ["## Charts", ""]
        for title, path in charts:
            yield from [f"![{text(title)}]({path})", ""]
    for kind in kinds:
        made = (details or {}).get(kind.name)
        yield from kind.markdown_details(report) if made is None else made


def markdown_report(
    report: EvalReport,
    kinds: Sequence[Kind[Any, Any]],
    charts: Sequence[tuple[str, str]] = (),
    charts_failed: str | None = None,
) -> str:
    """`report.md`'s text, whole."""
    return "\n".join(markdown_lines(report, kinds, charts, charts_failed))


def head_lines(report: EvalReport) -> list[str]:
    """What was decided, before anything else: PARTIAL in bold, the headline's other lines
    (`report/headline.py`) as a list, then the exit status with what it means
    (`report/exit_status.py`). `report.md` and the step summary open with it."""
    figures = model_figures(report)
    lines = headline_lines(report, figures)
    partial = bool(lines) and lines[0] == report.partial
    first = [f"**{text(lines.pop(0))}**", ""] if partial else []
    listed = [f"- {text(line)}" for line in lines]
    return [
        *first,
        *listed,
        *([""] if listed else []),
        f"**{text(exit_line(report, figures))}**",
        "",
    ]


def summary_lines(report: EvalReport, kinds: Sequence[Kind[Any, Any]]) -> list[str]:
    """The run-level sections (the HTML report's summary shows the same)."""
    lines: list[str] = []
    for kind in kinds:
        lines += kind.markdown_summary(report)
    lines += _comparison_lines(report)
    if report.trials:
        lines += _trial_lines(report)
    if report.task_verdicts:
        lines += _verdict_lines(report)
    if report.errors:
        lines += ["## Errors (not scored)", ""]
        rows = [[Code(e.nodeid), e.message] for e in report.errors]
        lines += [*table(["Item", "Error"], rows), ""]
    if report.budget is not None:
        lines += ["## Budget", "", text(report.budget.line()), ""]
    if report.early_stop is not None:
        lines += ["## Early stop", "", text(report.early_stop.line()), ""]
    if report.judge_calls_saved:
        lines += ["## Judge calls saved", "", text(judge_saved_line(report)), ""]
    if report.stopped:
        lines += ["## Stopped by the cost limit (not scored)", ""]
        rows = [[Code(s.nodeid), s.reason] for s in report.stopped]
        lines += [*table(["Item", "Why"], rows), ""]
    if notes := cost_notes(report):
        lines += ["## Cost", "", *(f"- {text(note)}" for note in notes), ""]
    if report.baseline is not None:
        lines += _baseline_lines(report.baseline)
    return lines


def _baseline_lines(comparison: BaselineComparison) -> list[str]:
    """`--llm-baseline`: the paired change per model, the flipped tasks and the verdict."""
    lines = ["## Baseline", "", f"Baseline {text(comparison.ref)}: {text(comparison.source)}", ""]
    if comparison.models:
        lines += [*table(*baseline.change_rows(comparison)), ""]
    lines += [f"- {text(note)}" for note in baseline.notes(comparison)]
    return [*lines, "", f"**Verdict:** {text(baseline.verdict(comparison))}", ""]


def _comparison_lines(report: EvalReport) -> list[str]:
    """Models and guidance documents side by side, the flipped tasks, then the diagnostics."""
    lines = []
    if report.comparisons:
        lines += ["", "## Comparisons", "", "Paired over the tasks both ran; a - b.", ""]
        lines += table(*comparison_rows(report))
        if comparisons_small(report):
            lines += ["", text(SMALL_NOTE)]
        if note := multiplicity_note(report):
            lines += ["", text(note)]
        for said, tasks in flips(report):
            lines += ["", f"{text(said)}:", "", *(f"- {code(task)}" for task in tasks)]
        lines += [""]
    if note := uncompared_note(report):
        lines += [] if report.comparisons else ["", "## Comparisons"]
        lines += ["", text(note), ""]
    findings = diagnostic_findings(report)
    if findings:
        lines += ["## Cross-Model Diagnostics", ""]
        for said, items in findings:
            lines += [f"{text(said)}:", "", *(f"- {code(item)}" for item in items), ""]
    return lines


def _trial_lines(report: EvalReport) -> list[str]:
    """pass@k and pass^k per kind and model, then the tasks whose attempts disagree."""
    lines = ["", "## Trials", "", f"{report.metadata.trials} attempts per task.", ""]
    lines += table(*trial_rows(report))
    notes = left_out_notes(report)
    if notes:
        lines += ["", *(f"- {text(note)}" for note in notes)]
    flaky = flaky_entries(report)
    if flaky:
        lines += ["", "Flaky tasks (attempts disagree):", ""]
        lines += [f"- {text(kind)}, {text(model)}: {code(task)}" for kind, model, task in flaky]
    return [*lines, ""]


def _verdict_lines(report: EvalReport) -> list[str]:
    """Each task's verdict over its trials (`TaskVerdict`): the rule, how many tasks met it
    per kind and model, then every task that did not, with k/N and, if undecided, why."""
    counts: dict[tuple[str, str], list[int]] = {}
    for v in report.task_verdicts:
        row = counts.setdefault((v.kind, v.model), [0, 0, 0, 0, 0])
        row[0] += 1
        row[{"pass": 1, "fail": 2, "undecided": 3}[v.verdict]] += 1
        row[4] += v.flaky
    rule = report.task_rule or "?"
    lines = [
        "## Per-task verdicts",
        "",
        text(
            f"A task passes with {rule} of its trials passed; "
            "an undecided task (errored or missing trials) does not count as passing."
        ),
        "",
    ]
    headers = ["Kind", "Model", "Tasks", "Met the rule", "Below it", "Undecided", "Flaky"]
    rows = [[kind, model, *(str(n) for n in row)] for (kind, model), row in counts.items()]
    lines += table(headers, rows)
    below = [v for v in report.task_verdicts if v.verdict != "pass"]
    if below:
        lines += ["", "Tasks that did not meet the rule:", ""]
        for v in below:
            why = f": {v.reason}" if v.verdict == "undecided" and v.reason else ""
            said = text(f"{v.verdict.upper()} {v.shown}{why}")
            lines.append(f"- {text(v.kind)}, {text(v.model)}: {code(v.task)} {said}")
    return [*lines, ""]


def metadata_lines(meta: RunMetadata) -> list[str]:
    # What each name resolved to, endpoint and parameters included (never a credential), as
    # the baseline table and `llmtool history show` say it.
    models = ", ".join(f"{m.name} ({baseline.describe(m)})" for m in meta.models)
    versions = [f"pytest-llmtool {meta.plugin}", f"pytest {meta.pytest}", f"Python {meta.python}"]
    versions += [f"bashkit {meta.bashkit}"] if meta.bashkit else []
    versions += [f"{name} {version}" for name, version in meta.sdks.items()]
    rows = [
        ("Models", models),
        ("Versions", ", ".join(versions)),
    ]
    if meta.agents:  # the agent CLIs that drove the models, as each named its version
        said = (f"{name} {version or '(version unknown)'}" for name, version in meta.agents.items())
        rows.append(("Agent CLIs", ", ".join(said)))
    rows += [
        ("Max turns, trials", f"{meta.max_turns}, {meta.trials}"),
        ("Command line", " ".join(["pytest", *meta.command_line])),
        ("Started, finished", f"{meta.started}, {meta.finished} (exit status {meta.exit_status})"),
    ]
    if meta.wall_s is not None:
        rows.append(("Wall time", f"{meta.wall_s:.1f} s (this session)"))
    return [f"- **{name}**: {text(value)}" for name, value in rows]
