"""The results journal: one JSON line per finished item, appended as it finishes.

`report.json` is written at the end of the session, so a run killed outright (SIGKILL, the
machine going away) would keep nothing; the journal keeps every result that finished, for
`--llm-resume` and for people. The first line is a header (format version, start time,
command-line arguments, and the settings a resumed run must share: `run_identity`); each
further line is
`{"type": <kind> | "error" | "stopped", "nodeid": ..., "fingerprint": ..., "data": {...}}` (the
kind of task, `bash` or `scenario`, an error record, or an item the cost limit stopped, kept for
what it spent), `data` being the record `report.json` holds
for that item and `fingerprint` what it was made of (`run/digests.py`: the task as loaded and
the model as resolved; results only). Lines are flushed as written, so only the line being
written when the process dies can be lost, and readers drop such a torn last line.

The journal serves a later run, not this one: when it cannot be written (a full disk, a
directory gone), the writer stops writing and keeps why (`problem`), which the controller says
once, and the run goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest

import pytest_llmtool

if TYPE_CHECKING:
    from pytest_llmtool.settings import Settings

JOURNAL_NAME = "results.jsonl"
JOURNAL_VERSION = 1


def journal_path(config: pytest.Config, report_dir: Path | None) -> Path | None:
    """`results.jsonl` next to the reports, else in pytest's cache (when it is enabled)."""
    if report_dir is not None:
        return report_dir / JOURNAL_NAME
    cache: pytest.Cache | None = getattr(config, "cache", None)
    return None if cache is None else cache.mkdir("llmtool") / JOURNAL_NAME


def run_identity(settings: Settings) -> dict[str, Any]:
    """What a journal's header records of the settings that decide its results: a run may
    only be resumed under the same ones, or its report would mix two different runs."""
    return {
        "plugin": pytest_llmtool.__version__,
        "models": [m.name for m in settings.models],
        "model_ids": [f"{m.provider}:{m.model_id}" for m in settings.models],
        "trials": settings.trials,
        "max_turns": settings.max_turns,
        # --llm-bash: None for bashkit alone, as journals from before the option read.
        "bash": None if settings.bash == ("bashkit",) else list(settings.bash),
    }


class JournalWriter:
    """Starts a new journal (replacing an old one) and appends entries to it.

    The new journal is written beside the old one, header and `seed` entries first, and
    then moved over it: a resumed run (whose seed is the old journal's results) that dies at
    any moment leaves one journal or the other, whole, to resume from again.

    Any `OSError` (opening, writing, flushing, closing) stops the journal: `problem` says
    why, naming the path, and every later call does nothing. An old journal being replaced
    is then left as it was. `failed`: the error that kept the journal from being placed at
    all (pytest's cache could not be made); `path` is then where it happened."""

    def __init__(
        self,
        path: Path,
        header: dict[str, Any],
        seed: Iterable[JournalEntry] = (),
        failed: OSError | None = None,
    ) -> None:
        self.path = path
        self.problem: str | None = None
        self._file: IO[str] | None = None
        if failed is not None:
            self._fail(failed)
            return
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = partial.open("w", encoding="utf-8")
            self._write({"type": "header", "version": JOURNAL_VERSION, **header})
            for entry in seed:
                self.append(entry.type, entry.nodeid, entry.data, entry.fingerprint)
            if self.problem is None:
                # The open file moves with its name: appends go on into the journal.
                os.replace(partial, path)
        except OSError as exc:
            self._fail(exc)
        if self.problem is not None:
            with contextlib.suppress(OSError):  # the old journal, if any, stays whole
                partial.unlink(missing_ok=True)

    def _fail(self, exc: OSError) -> None:
        """Stop the journal for good, once: closing may raise what writing did."""
        if self.problem is None:
            self.problem = f"{self.path}: {exc.strerror or exc}"
        file, self._file = self._file, None
        if file is not None:
            # Its unflushed buffer may fail again; the file is closed all the same.
            with contextlib.suppress(OSError):
                file.close()

    def _write(self, obj: dict[str, Any]) -> None:
        self._write_line(json.dumps(obj, ensure_ascii=False) + "\n")

    def _write_line(self, line: str) -> None:
        if self.problem is not None:
            return
        assert self._file is not None, "journal already closed"
        try:
            self._file.write(line)
            self._file.flush()
        except OSError as exc:
            self._fail(exc)

    def append(
        self, kind: str, nodeid: str, data: dict[str, Any], fingerprint: str | None = None
    ) -> None:
        tagged = {"fingerprint": fingerprint} if fingerprint is not None else {}
        self._write({"type": kind, "nodeid": nodeid, **tagged, "data": data})

    def append_json(
        self, kind: str, nodeid: str, data: str, fingerprint: str | None = None
    ) -> None:
        """`append`, with `data` already as JSON text (the controller has it so)."""
        tagged = {"fingerprint": fingerprint} if fingerprint is not None else {}
        head = json.dumps({"type": kind, "nodeid": nodeid, **tagged}, ensure_ascii=False)
        self._write_line(f'{head[:-1]}, "data": {data}}}\n')

    def close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError as exc:
                self._fail(exc)


@dataclass(frozen=True)
class JournalEntry:
    type: str
    nodeid: str
    data: dict[str, Any]
    # What the result was made of (`run/digests.py`); None in an entry that records none.
    fingerprint: str | None = None


@dataclass(frozen=True)
class Journal:
    header: dict[str, Any]
    entries: list[JournalEntry]


def read_journal(path: Path) -> Journal:
    """Read a journal; a torn last line (the process died writing it) is dropped.

    Raises ValueError when the file is not a journal of a version we read, or is damaged
    anywhere but its last line."""
    # Split on newlines only: `splitlines` also splits at U+2028 and U+0085, which JSON
    # written with raw non-ASCII text (a model's answer) may hold inside a string.
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines[-1] == "":
        lines.pop()
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number}: not a JSON line") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number}: not a JSON object")
        records.append(record)
    if not records or records[0].get("type") != "header":
        raise ValueError(f"{path}: no journal header")
    header, *rest = records
    if header.get("version") != JOURNAL_VERSION:
        raise ValueError(f"{path}: journal version {header.get('version')!r} is not supported")
    entries = []
    for number, record in enumerate(rest, 2):
        kind, nodeid, data = record.get("type"), record.get("nodeid"), record.get("data")
        if not isinstance(kind, str) or kind == "header" or not isinstance(nodeid, str):
            raise ValueError(f"{path}:{number}: not a journal entry")
        if not isinstance(data, dict):
            raise ValueError(f"{path}:{number}: entry without data")
        fingerprint = record.get("fingerprint")
        if fingerprint is not None and not isinstance(fingerprint, str):
            raise ValueError(f"{path}:{number}: the fingerprint is not a string")
        entries.append(JournalEntry(kind, nodeid, data, fingerprint))
    return Journal(header, entries)
