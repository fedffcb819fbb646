"""`gaps.json` and `gaps.md` (`--llm-gaps=DIR`, `llmtool gaps`), and the terminal line.

Every subject, message and command here came from a tool's output or a model: the Markdown
writes them inert (`text`, `code`), the terminal line with control characters escaped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_llmtool.gaps import (
    CLASS_NAMES,
    CLASSES,
    Gap,
    GapReport,
    ReplayError,
    ReplayReport,
    report_gaps,
)
from pytest_llmtool.records import EvalReport
from pytest_llmtool.report import Writer, write_atomic
from pytest_llmtool.report.markdown import Code, code, table, text

if TYPE_CHECKING:
    from pytest_llmtool.kinds import Kind

JSON_NAME = "gaps.json"
MARKDOWN_NAME = "gaps.md"
# Gaps named on the terminal line, tasks listed per gap in the Markdown, command length shown.
TOP_GAPS = 3
LISTED_TASKS = 10
SHOWN_COMMAND = 300


def plain(value: object) -> str:
    """Text for the terminal: one line, control and format characters escaped."""
    flat = " ".join(str(value).split())
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in flat)


def _shown(command: str) -> str:
    flat = " ".join(command.split())
    return flat if len(flat) <= SHOWN_COMMAND else flat[:SHOWN_COMMAND] + "…"


def count(n: int, noun: str) -> str:
    """`1 call`, `2 calls`."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _models(gap: Gap) -> str:
    return ", ".join(f"{model} {calls}" for model, calls in gap.models.items())


def markdown(report: GapReport) -> str:
    """`gaps.md`: the counts, the ranked gaps, the likely tool gaps, one example per gap, and
    the replay's then and now."""
    lines = [
        "# Gap report",
        "",
        "Every tool call that exited non-zero, classified from its error message and grouped "
        "by class and subject; ranked by tasks affected, then by failed calls.",
        "",
        f"- **Tool calls**: {report.tool_calls}, {report.failed_calls} failed",
        f"- **Models**: {text(', '.join(report.models)) or '-'}",
    ]
    if report.bashkit:
        lines.append(f"- **bashkit**: {text(report.bashkit)}")
    lines += ["", *table(["Class", "Failed calls"], _class_rows(report)), ""]
    if report.gaps:
        lines += ["## Gaps", ""]
        rows = [
            [
                str(i),
                Code(g.key),
                str(g.calls),
                str(g.task_count),
                _models(g),
                likely_cell(g),
            ]
            for i, g in enumerate(report.gaps, 1)
        ]
        headers = ["#", "Gap", "Calls", "Tasks", "Models (calls)", "Likely tool gap"]
        lines += [*table(headers, rows), ""]
    if report.likely_tool_gaps:
        lines += [
            "## Likely tool gaps",
            "",
            "Tasks every model failed (two or more models; most attempts of each), each "
            "model's failed attempts hitting the same gap:",
            "",
        ]
        for entry in report.likely_tool_gaps:
            gaps = ", ".join(code(key) for key in entry.gaps)
            lines.append(f"- {code(entry.task)} ({text(', '.join(entry.models))}): {gaps}")
        lines.append("")
    if report.gaps:
        lines += ["## Examples", ""]
        for i, gap in enumerate(report.gaps, 1):
            lines += _example_lines(i, gap)
    if report.replay is not None:
        lines += replay_lines(report.replay)
    if report.attribution:
        lines += attribution_lines(report)
    return "\n".join(lines)


def attribution_lines(report: GapReport) -> list[str]:
    """Each bashkit failure replayed in a container: bashkit's gap, or the model's (★)."""
    ours = sum(a.cause == "bashkit" for a in report.attribution)
    lines = [
        "## bashkit or the model",
        "",
        "Each bash task attempt that failed in bashkit, its tool calls replayed as recorded "
        "in a fresh container (real bash, `--llm-bash=bashkit,container`) and scored by the "
        "same checks: passing there makes the failure bashkit's; failing there too, the "
        f"model's (★). {ours} of {len(report.attribution)} are bashkit's.",
        "",
    ]
    rows = [
        [
            Code(a.task),
            text(a.model),
            str(a.trial),
            "bashkit gap" if a.cause == "bashkit" else "★ model",
            text(a.detail),
        ]
        for a in report.attribution
    ]
    return [*lines, *table(["Task", "Model", "Trial", "Cause", "In the container"], rows), ""]


def likely_cell(gap: Gap) -> str:
    """The "Likely tool gap" cell: the sandbox's refusal by name, else `yes` when every model
    failed a task on it."""
    if gap.tool_gap:
        return gap.tool_gap
    return "yes" if gap.likely_tool_gap else ""


def _class_rows(report: GapReport) -> list[list[str]]:
    return [[CLASS_NAMES[c], str(report.by_class.get(c, 0))] for c in CLASSES]


def _example_lines(rank: int, gap: Gap) -> list[str]:
    example = gap.example
    lines = [f"### {rank}. {code(gap.key)}", ""]
    if gap.hint:
        lines.append(f"- **Hint**: {text(gap.hint)}")
    if example.message:
        lines.append(f"- **Message**: {code(example.message)}")
    lines.append(
        f"- **Command** (task {code(example.task)}, model {text(example.model)}, exit "
        f"{example.exit_code}): {code(_shown(example.command))}"
    )
    listed = ", ".join(code(t) for t in gap.tasks[:LISTED_TASKS])
    more = len(gap.tasks) - LISTED_TASKS
    lines.append(f"- **Tasks**: {listed}" + (f" and {more} more" if more > 0 else ""))
    return [*lines, ""]


def replay_lines(replay: ReplayReport) -> list[str]:
    """The replay's section: where the runs and their tasks came from, then per gap."""
    lines = [f"## Replay on bashkit {text(replay.bashkit_now)}", ""]
    for source in replay.sources:
        recorded = f"bashkit {source.bashkit}" if source.bashkit else "bashkit version not recorded"
        when = f", started {source.started}" if source.started else ""
        lines.append(f"- {code(source.path)} ({text(source.format)}, {text(recorded + when)})")
    lines += ["", f"Tasks looked up by {text(replay.dataset_rule)}."]
    if replay.datasets:
        lines.append("")
        for dataset, found in replay.datasets.items():
            where = code(found) if found else "not found"
            lines.append(f"- {code(dataset)}: {where}")
    lines += [
        "",
        f"{count(replay.attempts, 'task attempt')} replayed, {count(replay.calls, 'call')}: "
        f"{replay.failed_then} failed then, {replay.failed_now} now.",
        "",
    ]
    if replay.gaps:
        rows = [
            [
                Code(g.key),
                str(g.then),
                str(g.now),
                str(g.then_ok_now),
                str(g.then_other_now),
                g.status,
            ]
            for g in replay.gaps
        ]
        headers = ["Gap", "Calls then", "Calls now", "Of then: ok now", "Of then: other gap now"]
        lines += [*table([*headers, "Status"], rows), ""]
        for label, keys in (("Fixed", replay.fixed), ("Changed", replay.changed)):
            if keys or label == "Fixed":
                listed = ", ".join(code(k) for k in keys) or "none"
                lines += [f"**{label}** ({len(keys)}): {listed}", ""]
        lines += [
            "Fixed: every call that hit the gap exits 0 now. Changed: none hits it now, but "
            "some fail otherwise (the error moved on, or is worded differently). Calls are "
            "replayed as recorded, without a model to react to what they print now.",
            "",
        ]
    if replay.not_replayed:
        reasons = Counter(n.reason for n in replay.not_replayed)
        lines += [f"Not replayed: {len(replay.not_replayed)} attempts.", ""]
        lines += [f"- {text(reason)}: {n}" for reason, n in sorted(reasons.items())]
        lines.append("")
    return lines


def terminal_line(report: GapReport, paths: Sequence[Path]) -> str:
    """One line: the failed calls, the top gaps, the likely tool gaps, the sandbox's refusals,
    the replay, the files."""
    where = " -> " + ", ".join(str(p) for p in paths) if paths else ""
    if not report.failed_calls:
        said = f"gaps: no failed tool calls ({report.tool_calls} calls)"
    else:
        top = "; ".join(
            f"{g.key} ({count(g.calls, 'call')}, {count(g.task_count, 'task')})"
            for g in report.gaps[:TOP_GAPS]
        )
        said = (
            f"gaps: {report.failed_calls} of {count(report.tool_calls, 'tool call')} failed, "
            f"{count(len(report.gaps), 'gap')}; top: {top}"
        )
        if report.likely_tool_gaps:
            said += f"; likely tool gaps in {count(len(report.likely_tool_gaps), 'task')}"
        refused = [g.key for g in report.gaps if g.tool_gap]
        if refused:
            said += f"; the sandbox's own refusals (tool gaps): {', '.join(refused[:TOP_GAPS])}"
            said += f" and {len(refused) - TOP_GAPS} more" if refused[TOP_GAPS:] else ""
    if report.attribution:
        ours = sum(a.cause == "bashkit" for a in report.attribution)
        said += (
            f"; bashkit failures replayed in a container: {ours} bashkit's, "
            f"{len(report.attribution) - ours} the model's ★"
        )
    replay = report.replay
    if replay is not None:
        said += (
            f"; replay on bashkit {replay.bashkit_now}: {count(len(replay.fixed), 'gap')} "
            f"fixed, {len(replay.remaining)} remaining"
        )
        if replay.changed:
            said += f", {len(replay.changed)} changed"
    return plain(said + where)


def write(report: GapReport, directory: Path) -> list[Path]:
    """`gaps.json` and `gaps.md` in `directory`, each written atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path, md_path = directory / JSON_NAME, directory / MARKDOWN_NAME
    write_atomic(json_path, report.model_dump_json(indent=2) + "\n")
    write_atomic(md_path, markdown(report))
    return [json_path, md_path]


class GapsWriter(Writer):
    """`--llm-gaps=DIR`: the run's gap report; with `--llm-gaps-from`, recorded runs
    replayed beside it. A replay that cannot be read is said on the terminal, not raised, so
    it never costs the run its other reports."""

    def __init__(
        self, directory: Path, recorded: Sequence[Path] = (), bases: Sequence[Path] = ()
    ) -> None:
        self.directory = directory
        self.recorded = tuple(recorded)
        self.bases = tuple(bases)
        self.gaps: GapReport | None = None
        self.paths: list[Path] = []
        self.problem: str | None = None

    def files(
        self, report: EvalReport, kinds: Sequence[Kind[Any, Any]], directory: Path | None
    ) -> list[Path]:
        from pytest_llmtool.gaps.replay import load_run, replay

        self.gaps = report_gaps(report)
        if self.recorded:
            try:
                runs = [load_run(path) for path in self.recorded]
                self.gaps.replay = replay(runs, bases=self.bases)
            except ReplayError as exc:
                self.problem = str(exc)
        self.paths = write(self.gaps, self.directory)
        return self.paths

    def terminal(self, report: EvalReport, kinds: Sequence[Kind[Any, Any]]) -> list[str]:
        if self.gaps is None:
            return []
        lines = ["", terminal_line(self.gaps, self.paths)]
        if self.problem is not None:
            lines.append(plain(f"gaps: --llm-gaps-from not replayed: {self.problem}"))
        return lines
