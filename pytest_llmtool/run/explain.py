"""`--llm-explain-collect`: what the plugin made of every JSONL and YAML file pytest
considered, and which folders it kept out, said after collection; nothing runs.

A file the plugin leaves alone (a near miss, a file no pattern names) is otherwise silent;
this says which rule took or left each one, so a dataset that vanished can be found.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_llmtool.inputs.templates import FOLDERS_KEY
from pytest_llmtool.kinds import Recognition

EXPLAIN_KEY = pytest.StashKey["CollectExplainer"]()


class CollectExplainer:
    """Registered when the option is on; `collect_file` tells it each file's verdicts."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.files: dict[Path, list[tuple[str, Recognition]]] = {}

    def record(
        self, path: Path, verdicts: list[tuple[str, Recognition]], session: pytest.Session
    ) -> None:
        # pytest offers every file of a folder it enters, even beside the one asked for.
        if verdicts and any(session.isinitpath(p) for p in (path, *path.parents)):
            self.files[path] = verdicts

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is None:
            return
        terminal.write_sep("-", "llmtool: what was collected and why")
        for line in self.lines():
            terminal.write_line(line)

    def lines(self) -> list[str]:
        out = []
        for path, verdicts in sorted(self.files.items()):
            kind, last = verdicts[-1]
            if last.taken:
                out.append(f"{self._show(path)}: collected as {kind}: {last.why}")
            else:
                why = "; ".join(f"{k}: {v.why}" for k, v in verdicts)
                out.append(f"{self._show(path)}: left alone: {why}")
        folders = self.config.stash.get(FOLDERS_KEY, None)
        for folder, by in sorted(folders.kept_out.items() if folders else ()):
            out.append(
                f"{self._show(folder)}/: kept out: {self._show(by)} copies it to its sandbox"
            )
        return out or ["no JSONL or YAML file was considered"]

    def _show(self, path: Path) -> str:
        return os.path.relpath(path, self.config.invocation_params.dir)
