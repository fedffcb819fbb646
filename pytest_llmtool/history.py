"""Run history: every run appended to a SQLite database (`--llm-history`).

One row per run (its whole `EvalReport` JSON among them) and one per item. The controller
writes it once, at session finish, in one transaction; WAL and a busy timeout let two runs
finish at once. The database carries its schema version: each step of `MIGRATIONS` brings it
one version up, and a database from a newer plugin is refused rather than misread.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pytest_llmtool.outcomes import outcomes
from pytest_llmtool.records import EvalReport
from pytest_llmtool.report import Writer, report_json
from pytest_llmtool.stats import wilson

if TYPE_CHECKING:
    from pytest_llmtool.kinds import Kind

DEFAULT_PATH = Path(".llmtool") / "history.db"
BUSY_TIMEOUT_S = 60.0


class HistoryError(Exception):
    """The history cannot be read or written as asked; the message says why."""


def _v1(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    db.execute("INSERT INTO schema_version VALUES (0)")
    db.execute(
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            started TEXT NOT NULL,
            finished TEXT NOT NULL,
            exit_status INTEGER NOT NULL,
            models TEXT NOT NULL,  -- JSON list, as --llm-model named them
            kinds TEXT NOT NULL,  -- JSON list of the kinds with items, sorted
            items INTEGER NOT NULL,
            plugin TEXT NOT NULL,
            schema_version INTEGER NOT NULL,  -- of the report
            report TEXT NOT NULL  -- the whole EvalReport JSON
        )"""
    )
    db.execute(
        """CREATE TABLE results (
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            kind TEXT NOT NULL,
            nodeid TEXT NOT NULL,
            task TEXT NOT NULL,  -- node id without the trial suffix
            task_id TEXT NOT NULL,
            model TEXT NOT NULL,
            trial INTEGER NOT NULL,
            category TEXT NOT NULL,
            outcome TEXT NOT NULL CHECK (outcome IN ('pass', 'fail', 'error')),
            score REAL,
            max_score REAL,
            rate REAL,  -- score in [0, 1]: the kind's rate
            cost_usd REAL,
            input_tokens INTEGER NOT NULL,
            output_tokens INTEGER NOT NULL,
            duration_ms INTEGER
        )"""
    )
    db.execute("CREATE INDEX results_by_run ON results (run_id, model)")


# Step n brings a database from version n to n + 1.
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_v1,)
VERSION = len(MIGRATIONS)


def _version(db: sqlite3.Connection) -> int:
    exists = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if not exists:
        return 0
    row = db.execute("SELECT version FROM schema_version").fetchone()
    return int(row[0]) if row else 0


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    version = _version(db)
    if version > VERSION:
        raise HistoryError(
            f"{path} is a version {version} history database; this pytest-llmtool reads up "
            f"to version {VERSION}: upgrade pytest-llmtool, or use another --llm-history"
        )
    for step in MIGRATIONS[version:]:
        step(db)
    if version < VERSION:
        db.execute("UPDATE schema_version SET version = ?", (VERSION,))


@contextmanager
def transaction(path: Path, create: bool = False) -> Iterator[sqlite3.Connection]:
    """The database at `path`, brought up to date, in one write transaction.

    `BEGIN IMMEDIATE` takes the write lock first, so two runs finishing at once queue on the
    busy timeout instead of failing half-way; WAL keeps readers off the writer's way."""
    if not create and not path.is_file():
        raise HistoryError(f"no run history at {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)) as db:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA foreign_keys = ON")
            db.execute("BEGIN IMMEDIATE")
            try:
                _migrate(db, path)
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{path}: {exc}") from exc


def append(path: Path, report: EvalReport, kinds: Sequence[Kind[Any, Any]] = ()) -> int:
    """Add a run and its items; return the run's id."""
    rows = outcomes(report, kinds)
    meta = report.metadata
    with transaction(path, create=True) as db:
        cursor = db.execute(
            "INSERT INTO runs (started, finished, exit_status, models, kinds, items, plugin,"
            " schema_version, report) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                meta.started,
                meta.finished,
                meta.exit_status,
                json.dumps([m.name for m in meta.models]),
                json.dumps(sorted({row.kind for row in rows})),
                len(rows),
                meta.plugin,
                report.schema_version,
                "".join(report_json(report)),
            ),
        )
        run_id = cursor.lastrowid
        assert run_id is not None
        db.executemany(
            "INSERT INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    run_id,
                    r.kind,
                    r.nodeid,
                    r.task,
                    r.task_id,
                    r.model,
                    r.trial,
                    r.category,
                    "error" if r.passed is None else "pass" if r.passed else "fail",
                    r.score,
                    r.max_score,
                    r.rate,
                    r.cost_usd,
                    r.input_tokens,
                    r.output_tokens,
                    r.duration_ms,
                )
                for r in rows
            ],
        )
    return run_id


def latest_run(
    path: Path, models: Sequence[str] | None = None, kinds: Sequence[str] | None = None
) -> int | None:
    """The id of the newest run, or of the newest with exactly these models and kinds."""
    with transaction(path) as db:
        for run_id, run_models, run_kinds in db.execute(
            "SELECT id, models, kinds FROM runs ORDER BY id DESC"
        ):
            if models is not None and sorted(json.loads(run_models)) != sorted(models):
                continue
            if kinds is not None and sorted(json.loads(run_kinds)) != sorted(kinds):
                continue
            return int(run_id)
    return None


def load_report(path: Path, run: int | Literal["last"]) -> tuple[int, EvalReport]:
    """A stored run's id and `EvalReport`, by id or `last` (the newest run)."""
    run_id = latest_run(path) if run == "last" else run
    with transaction(path) as db:
        row = db.execute("SELECT report FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        raise HistoryError(f"no run {run} in {path}")
    return int(run_id or 0), EvalReport.model_validate_json(row[0])


class HistoryWriter(Writer):
    """Appends the run to the history database; a failure to do so is said, not raised, so
    it never costs the run its other reports."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.run_id: int | None = None
        self.problem: str | None = None

    def files(
        self, report: EvalReport, kinds: Sequence[Kind[Any, Any]], directory: Path | None
    ) -> list[Path]:
        try:
            self.run_id = append(self.path, report, kinds)
        except HistoryError as exc:
            self.problem = str(exc)
        # A database appended to, not a report file: the terminal line names it.
        return []

    def terminal(self, report: EvalReport, kinds: Sequence[Kind[Any, Any]]) -> list[str]:
        if self.problem is not None:
            return ["", f"history: not recorded: {self.problem}"]
        if self.run_id is None:
            return []
        return ["", f"history: run {self.run_id} in {self.path}"]


def _rate(passed: int, scored: int) -> dict[str, Any]:
    """A pass rate with its Wilson interval, as the command shows it."""
    interval = wilson(passed, scored)
    return {
        "passed": passed,
        "scored": scored,
        "rate": interval.estimate if interval else None,
        "low": interval.low if interval else None,
        "high": interval.high if interval else None,
    }


def runs(path: Path) -> list[dict[str, Any]]:
    """Every run, oldest first: when, models, items, exit status, pass rate per model."""
    with transaction(path) as db:
        rows = db.execute(
            "SELECT id, started, finished, exit_status, models, items FROM runs ORDER BY id"
        ).fetchall()
        counts = db.execute(
            "SELECT run_id, model, SUM(outcome = 'pass'), SUM(outcome != 'error')"
            " FROM results GROUP BY run_id, model"
        ).fetchall()
    rates: dict[int, dict[str, dict[str, Any]]] = {}
    for run_id, model, passed, scored in counts:
        rates.setdefault(run_id, {})[model] = _rate(passed, scored)
    return [
        {
            "id": run_id,
            "started": started,
            "finished": finished,
            "exit_status": exit_status,
            "models": json.loads(models),
            "items": items,
            "pass_rate": {m: rates.get(run_id, {}).get(m) for m in json.loads(models)},
        }
        for run_id, started, finished, exit_status, models, items in rows
    ]


Grouping = Literal["model", "category", "task"]


def trend(
    path: Path,
    model: str | None = None,
    category: str | None = None,
    task: str | None = None,
    by: Grouping = "model",
) -> list[dict[str, Any]]:
    """Pass rate with its Wilson interval per run and model (and category or task, `by`),
    over the items that match the filters; a task matches by its id or its node id."""
    where, params = ["outcome != 'error'"], []
    for clause, value in (
        ("model = ?", model),
        ("category = ?", category),
        ("(task_id = ? OR task = ?)", task),
    ):
        if value is not None:
            where.append(clause)
            params += [value] * clause.count("?")
    column = {"model": "''", "category": "category", "task": "task"}[by]
    with transaction(path) as db:
        rows = db.execute(
            f"SELECT run_id, started, model, {column}, SUM(outcome = 'pass'), COUNT(*)"
            " FROM results JOIN runs ON runs.id = run_id"
            f" WHERE {' AND '.join(where)}"
            f" GROUP BY run_id, model, {column} ORDER BY run_id, model, {column}",
            params,
        ).fetchall()
    return [
        {
            "run": run_id,
            "started": started,
            "model": row_model,
            **({by: group} if by != "model" else {}),
            **_rate(passed, scored),
        }
        for run_id, started, row_model, group, passed, scored in rows
    ]


def show(path: Path, run: int | Literal["last"]) -> dict[str, Any]:
    """One run: its record's metadata, pass rate per model and every item."""
    run_id, report = load_report(path, run)
    with transaction(path) as db:
        items = db.execute(
            "SELECT kind, nodeid, model, trial, category, outcome, score, max_score, cost_usd,"
            " duration_ms FROM results WHERE run_id = ? ORDER BY rowid",
            (run_id,),
        ).fetchall()
    names = ["kind", "nodeid", "model", "trial", "category", "outcome", "score", "max_score"]
    names += ["cost_usd", "duration_ms"]
    rows = [dict(zip(names, item, strict=True)) for item in items]
    meta = report.metadata
    models = [m.name for m in meta.models]
    return {
        "id": run_id,
        "started": meta.started,
        "finished": meta.finished,
        "exit_status": meta.exit_status,
        "plugin": meta.plugin,
        "command_line": meta.command_line,
        "models": models,
        "pass_rate": {
            m: _rate(
                sum(r["outcome"] == "pass" for r in rows if r["model"] == m),
                sum(r["outcome"] != "error" for r in rows if r["model"] == m),
            )
            for m in models
        },
        "items": rows,
    }
