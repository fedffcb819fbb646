"""Report writers: the terminal section, `report.json` and `report.md`."""

from __future__ import annotations

import os
from pathlib import Path

from pytest_llmtool.records import EvalReport
from pytest_llmtool.report.markdown import markdown_report


def _write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file so an interrupted run never leaves half a report."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_report_files(report: EvalReport, directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path, md_path = directory / "report.json", directory / "report.md"
    _write_atomic(json_path, report.model_dump_json(indent=2))
    _write_atomic(md_path, markdown_report(report))
    return [json_path, md_path]
