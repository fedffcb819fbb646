"""Reports: the `Writer` interface, the built-in writers and the formatting they share
(terminal tables, Markdown, HTML fragments, charts), secret redaction and the result store
they read. May import: the record, `inputs`, `stats`, `sandbox`, `agents`, `settings`.

Where a run report goes: the `Writer` interface and the built-in writers.

The controller hands the finished `EvalReport` to every writer (the built-in ones and those a
plugin returns from `pytest_llmtool_writers`): once at session finish for what it writes to
disk, once for the lines of the terminal summary.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from pytest_llmtool.records import EvalReport
from pytest_llmtool.report.markdown import markdown_lines
from pytest_llmtool.report.redact import Redactor
from pytest_llmtool.report.store import ResultStore
from pytest_llmtool.report.terminal import Screen, terminal_lines

if TYPE_CHECKING:
    from pytest_llmtool.kinds import Kind
    from pytest_llmtool.report.charts import Traced


class Writer:
    """One way out for the run report; a writer overrides what it does."""

    def before_report(
        self,
        stores: Mapping[str, ResultStore[Any]],
        kinds: Sequence[Kind[Any, Any]],
        directory: Path | None,
    ) -> None:
        """Called once the run's results are all in, before the report is built, with each
        kind's results by kind name: a writer that reads every result may `read_along` the
        pass that builds the summaries, rather than decode them all again in `files`."""

    def files(
        self, report: EvalReport, kinds: Sequence[Kind[Any, Any]], directory: Path | None
    ) -> list[Path]:
        """Write to disk (`directory` is `--llm-report`, if given); return what was written."""
        return []

    def terminal(self, report: EvalReport, kinds: Sequence[Kind[Any, Any]]) -> list[str]:
        """Lines for the terminal summary."""
        return []

    def terminal_screen(
        self, report: EvalReport, kinds: Sequence[Kind[Any, Any]], screen: Screen
    ) -> list[str]:
        """Lines for the terminal summary as `screen` asks (how much, how wide); by default
        `terminal`'s."""
        return self.terminal(report, kinds)


def write_atomic(path: Path, text: str | Iterable[str]) -> None:
    """Write via a temporary file so an interrupted run never leaves half a report; `text` may
    come in pieces, written as they are made. The environment's secrets are cut out of each
    piece (`report/redact.py`); the writers' pieces are whole lines or results."""
    redact = Redactor.from_env()
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as stream:
            if isinstance(text, str):
                stream.write(redact(text))
            else:
                stream.writelines(map(redact, text))
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)  # a full disk keeps no half-written copy
        if isinstance(exc, OSError) and exc.filename is None:  # a write names no file
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def _joined(lines: Iterable[str]) -> Iterator[str]:
    """`"\n".join(lines)`, in pieces."""
    for n, line in enumerate(lines):
        yield f"\n{line}" if n else line


class TerminalWriter(Writer):
    def terminal(self, report: EvalReport, kinds: Sequence[Kind[Any, Any]]) -> list[str]:
        return terminal_lines(report, kinds)

    def terminal_screen(
        self, report: EvalReport, kinds: Sequence[Kind[Any, Any]], screen: Screen
    ) -> list[str]:
        return terminal_lines(report, kinds, screen)


# The report's lists of results: written one result per line, from the controller's store.
RESULT_LISTS = ("results", "scenarios", "optimization_results", "harbor_results")


def report_json(report: EvalReport) -> Iterator[str]:
    """`report.json`'s text, piece by piece: the summaries indented, then each kind's results
    one per line, read from the store one at a time, so that writing a 100k-task report
    never holds it whole."""
    head = report.model_dump_json(indent=2, exclude=set(RESULT_LISTS))
    yield head.removesuffix("\n}")
    for name in RESULT_LISTS:
        results: Sequence[BaseModel] = getattr(report, name)
        yield f',\n  "{name}": ['
        texts = (
            results.json_texts()
            if isinstance(results, ResultStore)
            else (r.model_dump_json() for r in results)
        )
        for n, text in enumerate(texts):
            yield f"{',' if n else ''}\n    {text}"
        yield "\n  ]" if results else "]"
    yield "\n}"


class JsonWriter(Writer):
    """`report.json`: the versioned run record, valid against `report.schema.json`."""

    def files(
        self, report: EvalReport, kinds: Sequence[Kind[Any, Any]], directory: Path | None
    ) -> list[Path]:
        if directory is None:
            return []
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "report.json"
        write_atomic(path, report_json(report))
        return [path]


class MarkdownWriter(Writer):
    """`report.md`, and the charts it shows as SVG files beside it (`charts/`)."""

    def __init__(self) -> None:
        # What the charts read off the results, fed by the summaries' pass, and whether it
        # was fed them all; each kind's details, made along that pass (None if it fell short).
        self._traced: tuple[Traced, Callable[[], bool]] | None = None
        self._details: dict[str, Callable[[], Iterable[str] | None]] = {}

    def before_report(
        self,
        stores: Mapping[str, ResultStore[Any]],
        kinds: Sequence[Kind[Any, Any]],
        directory: Path | None,
    ) -> None:
        if directory is None:
            return
        from pytest_llmtool.report.charts import Traced

        traced = Traced()
        self._traced = traced, traced.read_along(stores)
        self._details = {
            kind.name: kind.markdown_details_along(stores[kind.name])
            for kind in kinds
            if kind.name in stores
        }

    def files(
        self, report: EvalReport, kinds: Sequence[Kind[Any, Any]], directory: Path | None
    ) -> list[Path]:
        fed, self._traced = self._traced, None
        along, self._details = self._details, {}
        details = {name: lines for name, made in along.items() if (lines := made()) is not None}
        if directory is None:
            return []
        from pytest_llmtool.report.charts import charts_or_reason

        directory.mkdir(parents=True, exist_ok=True)
        drawn, failed = charts_or_reason(report, fed[0] if fed and fed[1]() else None)
        folder = directory / "charts"
        for stale in folder.glob("*.svg"):  # an earlier run's chart this run does not draw
            stale.unlink()
        if drawn:
            folder.mkdir(exist_ok=True)
        for chart in drawn:
            write_atomic(folder / f"{chart.name}.svg", chart.svg)
        links = [(chart.title, f"charts/{chart.name}.svg") for chart in drawn]
        path = directory / "report.md"
        write_atomic(path, _joined(markdown_lines(report, kinds, links, failed, details)))
        return [path, folder] if drawn else [path]


class StepSummaryWriter(Writer):
    """The run's summary on a CI job's page (`$GITHUB_STEP_SUMMARY`, appended)."""

    def files(
        self, report: EvalReport, kinds: Sequence[Kind[Any, Any]], directory: Path | None
    ) -> list[Path]:
        from pytest_llmtool.report.step_summary import append_step_summary

        written = append_step_summary(report, kinds)
        return [written] if written else []
