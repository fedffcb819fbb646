"""History and the gate: the SQLite run history (this module) and the regression gate.
May import: everything up to `kinds`.

Run history: every run appended to a SQLite database (`--llm-history`).

One row per run (its whole `EvalReport` JSON among them, zlib-compressed), one per item, and,
with trials, one per task and model for its verdict over them (`TaskVerdict`).
The controller writes it once, at session finish, in one transaction; WAL and a busy timeout
let two runs finish at once. The database carries its schema version: each step of
`MIGRATIONS` brings it one version up, and a database from a newer plugin is refused rather
than misread.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pytest_llmtool.records import SCHEMA_VERSION, EvalReport, Interval
from pytest_llmtool.report import Writer, report_json
from pytest_llmtool.report.figures import ModelFigures, figures_of
from pytest_llmtool.report.store import ResultStore
from pytest_llmtool.stats import baseline
from pytest_llmtool.stats.outcomes import (
    Outcome,
    each_outcome,
    optimization_outcomes,
    read_along,
)

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
            report TEXT NOT NULL  -- the whole EvalReport JSON (zlib-compressed from v3)
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


def _v2(db: sqlite3.Connection) -> None:
    """Whether a run is complete, and its dataset's fingerprint (`last` needs both); NULL
    for runs recorded before, which `last` therefore passes over."""
    db.execute("ALTER TABLE runs ADD COLUMN complete INTEGER")
    db.execute("ALTER TABLE runs ADD COLUMN fingerprint TEXT")  # JSON: kind -> digest


def _v3(db: sqlite3.Connection) -> None:
    """Runs recorded from now on keep `report` zlib-compressed (a BLOB; `_report_text`
    reads both). The schema is unchanged: the version tells an older plugin, which would
    take the BLOB for a damaged run, to refuse the database instead."""


def _v4(db: sqlite3.Connection) -> None:
    """Each model's headline figures (`report/figures.py`'s), counted off the run's items as
    it is recorded, so `list` shows them without reading every report; NULL for runs
    recorded before, which `list` works out from their items by the same method."""
    db.execute("ALTER TABLE runs ADD COLUMN figures TEXT")  # JSON: see `_stored`


def _v5(db: sqlite3.Connection) -> None:
    """Each task's verdict over its trials and the run's per-task rule (`--llm-task-pass`),
    so `list` counts the tasks meeting it without reading every report; runs recorded
    before have none (their reports have none either)."""
    db.execute("ALTER TABLE runs ADD COLUMN task_rule TEXT")
    db.execute(
        """CREATE TABLE task_verdicts (
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            kind TEXT NOT NULL,
            model TEXT NOT NULL,
            task TEXT NOT NULL,  -- node id without the trial suffix
            task_id TEXT NOT NULL,
            category TEXT NOT NULL,
            trials INTEGER NOT NULL,
            need INTEGER NOT NULL,
            passed INTEGER NOT NULL,
            failed INTEGER NOT NULL,
            errored INTEGER NOT NULL,
            not_needed INTEGER NOT NULL,
            verdict TEXT NOT NULL CHECK (verdict IN ('pass', 'fail', 'undecided')),
            reason TEXT NOT NULL,
            flaky INTEGER NOT NULL
        )"""
    )
    db.execute("CREATE INDEX task_verdicts_by_run ON task_verdicts (run_id, model)")


# Step n brings a database from version n to n + 1.
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_v1, _v2, _v3, _v4, _v5)
VERSION = len(MIGRATIONS)


def _version(db: sqlite3.Connection) -> int:
    exists = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if not exists:
        return 0
    row = db.execute("SELECT version FROM schema_version").fetchone()
    return int(row[0]) if row else 0


def _refuse_newer(db: sqlite3.Connection, path: Path) -> int:
    """The database's schema version; one from a newer plugin is refused before anything,
    the journal mode included, touches its file."""
    version = _version(db)
    if version > VERSION:
        raise HistoryError(
            f"{path} is a version {version} history database; this pytest-llmtool reads up "
            f"to version {VERSION}: upgrade pytest-llmtool, or use another --llm-history"
        )
    return version


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    version = _refuse_newer(db, path)
    for step in MIGRATIONS[version:]:
        step(db)
    if version < VERSION:
        db.execute("UPDATE schema_version SET version = ?", (VERSION,))


@contextmanager
def transaction(path: Path) -> Iterator[sqlite3.Connection]:
    """The database at `path`, brought up to date, in one write transaction.

    `BEGIN IMMEDIATE` takes the write lock first, so two runs finishing at once queue on the
    busy timeout instead of failing half-way; WAL keeps readers off the writer's way."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # the default database's directory: a set one is checked first
        raise HistoryError(f"{path}: cannot make its directory: {exc}") from exc
    try:
        with closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)) as db:
            _refuse_newer(db, path)
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


def _open_read_only(path: Path) -> sqlite3.Connection:
    """`mode=ro`; where SQLite cannot make the WAL index it needs beside the database (a
    read-only directory with no writer), `immutable=1`, which reads the file as it is."""
    uri = path.resolve().as_uri()
    db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        db.execute("SELECT 1 FROM sqlite_master").fetchone()
    except sqlite3.OperationalError:
        db.close()
        return sqlite3.connect(f"{uri}?immutable=1", uri=True)
    return db


@contextmanager
def reading(path: Path) -> Iterator[tuple[sqlite3.Connection, int]]:
    """The database at `path` opened read-only, with its schema version: a reader takes no
    write lock (it does not wait for a running writer) and works in a read-only directory.
    An older database is read as it is (`_columns`); a newer one is refused."""
    if not path.is_file():
        raise HistoryError(f"no run history at {path}")
    try:
        with closing(_open_read_only(path)) as db:
            version = _version(db)
            if version > VERSION:
                raise HistoryError(
                    f"{path} is a version {version} history database; this pytest-llmtool "
                    f"reads up to version {VERSION}: upgrade pytest-llmtool"
                )
            if version == 0:  # an empty file: read as an empty history, left as it is
                with closing(sqlite3.connect(":memory:")) as empty:
                    _migrate(empty, path)
                    yield empty, VERSION
            else:
                yield db, version
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{path}: cannot read it: {exc}") from exc


def _loads(path: Path, run_id: int, column: str, text: Any) -> Any:
    """A JSON column of a stored run; a damaged one is a `HistoryError` naming the run."""
    try:
        return json.loads(text) if text is not None else None
    except (TypeError, ValueError, RecursionError):
        raise HistoryError(f"{path}: run {run_id} is damaged (its {column})") from None


def _packed(pieces: Iterable[str]) -> bytes:
    """The report's JSON compressed a piece at a time. Stored whole as text, a 20,000-task
    report (20 MB) was held three times at once (the text and SQLite's two copies) and grew
    the database by as much; compressed it is a seventh (a real run's) to a fiftieth of that,
    and never whole."""
    packer = zlib.compressobj(1)
    packed = [packer.compress(piece.encode("utf-8")) for piece in pieces]
    packed.append(packer.flush())
    return b"".join(packed)


def _report_text(path: Path, run_id: int, stored: str | bytes) -> str:
    """A stored run's report JSON: compressed since version 3, text before."""
    if isinstance(stored, str):
        return stored
    try:
        return zlib.decompress(stored).decode("utf-8")
    except (zlib.error, UnicodeDecodeError, TypeError) as exc:
        raise HistoryError(f"{path}: run {run_id} is damaged: {exc}") from None


def _columns(version: int) -> str:
    """The run columns `last` needs, as NULL in a database from before version 2."""
    return "complete, fingerprint" if version >= 2 else "NULL, NULL"


def append(
    path: Path,
    report: EvalReport,
    kinds: Sequence[Kind[Any, Any]] = (),
    read: Mapping[str, Iterable[Outcome]] | None = None,
) -> int:
    """Add a run and its items; return the run's id. The items are read one at a time (the
    run's row counts them after), so a large run is never held whole beside its report;
    `read` has the outcomes of sections read along the summaries' pass (`each_outcome`).
    Each model's figures are counted off the same items as they are written (no pass of
    their own over a large run's results), as `model_figures` counts them."""
    meta = report.metadata
    with transaction(path) as db:
        if meta.resumed:
            # A resumed run is the run it resumed (same start, same models), carried on: it
            # replaces that run's row, partial or not, rather than adding one.
            db.execute(
                "DELETE FROM runs WHERE started = ? AND models = ?",
                (meta.started, json.dumps([m.name for m in meta.models])),
            )
        cursor = db.execute(
            "INSERT INTO runs (started, finished, exit_status, models, kinds, items, plugin,"
            " schema_version, report, complete, fingerprint)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                meta.started,
                meta.finished,
                meta.exit_status,
                json.dumps([m.name for m in meta.models]),
                "[]",
                0,
                meta.plugin,
                report.schema_version,
                _packed(report_json(report)),
                None if meta.complete is None else int(meta.complete),
                json.dumps(meta.fingerprint, sort_keys=True),
            ),
        )
        run_id = cursor.lastrowid
        assert run_id is not None
        seen: set[str] = set()
        count = 0
        tally: dict[str, Counts] = defaultdict(dict)

        def rows() -> Iterator[tuple[Any, ...]]:
            nonlocal count
            for r in chain(each_outcome(report, kinds, read), optimization_outcomes(report)):
                seen.add(r.kind)
                count += 1
                counts = tally[r.model].setdefault((r.kind, r.task_id), [0, 0, 0])
                counts[2 if r.passed is None else 0 if r.passed else 1] += 1
                yield (
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

        db.executemany(
            "INSERT INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows()
        )
        order = {m.name: n for n, m in enumerate(meta.models)}
        figures = [
            _stored(_counted(model, tally[model]))
            for model in sorted(tally, key=lambda m: (order.get(m, len(order)), m))
        ]
        db.execute(
            "UPDATE runs SET kinds = ?, items = ?, figures = ?, task_rule = ? WHERE id = ?",
            (json.dumps(sorted(seen)), count, json.dumps(figures), report.task_rule, run_id),
        )
        db.executemany(
            "INSERT INTO task_verdicts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (
                    run_id,
                    v.kind,
                    v.model,
                    v.task,
                    v.task_id,
                    v.category,
                    v.trials,
                    v.need,
                    v.passed,
                    v.failed,
                    v.errored + v.stopped,  # not scored, as stored before `stopped` was apart
                    v.not_needed,
                    v.verdict,
                    v.reason,
                    int(v.flaky),
                )
                for v in report.task_verdicts
            ),
        )
    return run_id


def latest_run(path: Path, models: Sequence[str] | None = None) -> int | None:
    """The id of the newest run, or of the newest with exactly these models."""
    with reading(path) as (db, _):
        for run_id, run_models in db.execute("SELECT id, models FROM runs ORDER BY id DESC"):
            if models is not None and sorted(
                _loads(path, run_id, "models", run_models) or []
            ) != sorted(models):
                continue
            return int(run_id)
    return None


def _partial(report_text: str) -> str:
    """`4 of 40 items ran (interrupted)`, read off a stored run's metadata."""
    line = EvalReport.model_validate_json(report_text).metadata.partial_line()
    return (line or "partial").removeprefix("PARTIAL: ")


def latest_complete(
    path: Path, models: Sequence[str], fingerprint: dict[str, str]
) -> tuple[int | None, list[str]]:
    """`--llm-baseline=last`: the newest complete run with the same models and dataset
    fingerprint, and why each newer run with these models was passed over."""
    passed: list[str] = []
    with reading(path) as (db, version):
        query = f"SELECT id, models, {_columns(version)} FROM runs ORDER BY id DESC"
        for run_id, run_models, complete, stored in db.execute(query):
            if sorted(_loads(path, run_id, "models", run_models) or []) != sorted(models):
                continue
            found = _loads(path, run_id, "fingerprint", stored)
            if complete is None or not found:
                passed.append(f"run {run_id}: recorded without a dataset fingerprint")
            elif found != fingerprint:
                passed.append(f"run {run_id}: another dataset (task ids or content differ)")
            elif not complete:
                row = db.execute("SELECT report FROM runs WHERE id = ?", (run_id,)).fetchone()
                text = _report_text(path, run_id, row[0])
                passed.append(f"run {run_id}: partial, {_partial(text)}")
            else:
                return int(run_id), passed
    return None, passed


def _report(path: Path, text: str, run_id: int) -> EvalReport:
    """A stored run's report; one from a newer plugin is refused rather than misread."""
    try:
        version = int(json.loads(text).get("schema_version", 1))
    except (ValueError, AttributeError, RecursionError) as exc:
        raise HistoryError(f"{path}: run {run_id} is damaged: {exc}") from None
    if version > SCHEMA_VERSION:
        raise HistoryError(
            f"{path}: run {run_id} is a schema {version} report; this pytest-llmtool reads "
            f"up to schema {SCHEMA_VERSION}: upgrade pytest-llmtool"
        )
    try:
        return EvalReport.model_validate_json(text)
    except ValueError as exc:
        first = str(exc).splitlines()[0]
        raise HistoryError(f"{path}: run {run_id} is damaged: {first}") from None


def load_report(path: Path, run: int | Literal["last"]) -> tuple[int, EvalReport]:
    """A stored run's id and `EvalReport`, by id or `last` (the newest run)."""
    run_id, text = stored_report(path, run)
    return run_id, _report(path, text, run_id)


def stored_report(path: Path, run: int | Literal["last"]) -> tuple[int, str]:
    """A stored run's id and its `report.json` text as stored, by id or `last`."""
    if not path.is_file():
        raise HistoryError(f"no run history at {path}")
    run_id = latest_run(path) if run == "last" else run
    if run_id is None or not 0 < run_id < 2**63:
        raise HistoryError(f"no run {run} in {path}")
    with reading(path) as (db, _):
        row = db.execute("SELECT report FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        raise HistoryError(f"no run {run} in {path}")
    return run_id, _report_text(path, run_id, row[0])


class HistoryWriter(Writer):
    """Appends the run to the history database; a failure to do so is said, not raised, so
    it never costs the run its other reports."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.run_id: int | None = None
        self.problem: str | None = None
        # The bash tasks' and scenarios' outcomes, gathered along the summaries' pass.
        self._read: Callable[[], dict[str, list[Outcome]]] | None = None

    def before_report(
        self,
        stores: Mapping[str, ResultStore[Any]],
        kinds: Sequence[Kind[Any, Any]],
        directory: Path | None,
    ) -> None:
        self._read = read_along(stores)

    def files(
        self, report: EvalReport, kinds: Sequence[Kind[Any, Any]], directory: Path | None
    ) -> list[Path]:
        gathered, self._read = self._read, None
        try:
            self.run_id = append(self.path, report, kinds, gathered() if gathered else None)
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


def _stored(figures: ModelFigures) -> dict[str, Any]:
    """A model's figures as the run's row keeps them (`figures`, JSON)."""
    rate = figures.rate
    return {
        "model": figures.model,
        "passed": figures.passed,
        "scored": figures.scored,
        "tasks": figures.tasks,
        "errors": figures.errors,
        "rate": None if rate is None else rate.model_dump(mode="json"),
    }


def _restored(path: Path, run_id: int, data: Any) -> dict[str, ModelFigures]:
    """A run's stored figures by model; a damaged entry is a `HistoryError` naming the run."""
    try:
        return {
            f["model"]: ModelFigures(
                model=f["model"],
                passed=int(f["passed"]),
                scored=int(f["scored"]),
                tasks=int(f["tasks"]),
                rate=None if f["rate"] is None else Interval.model_validate(f["rate"]),
                errors=int(f["errors"]),
                failed=[],
            )
            for f in data
        }
    except (TypeError, KeyError, ValueError):
        raise HistoryError(f"{path}: run {run_id} is damaged (its figures)") from None


# An item's task, as `report/figures.py` tells one from another: its kind and task id.
Counts = dict[tuple[str, str], list[int]]  # (kind, task id) -> [passed, failed, errored]


def _counted(model: str, tasks: Counts) -> ModelFigures:
    """`model_figures`' figures worked out from a run's items as the history keeps them (a
    task is its kind and task id; errors apart): the run's row, and `trend`'s groups."""
    attempts = {task: [True] * p + [False] * f for task, (p, f, _) in tasks.items()}
    return figures_of(model, attempts, sum(e for _, _, e in tasks.values()))


def _run_figures(
    path: Path, run_id: int, stored: Any, older: Mapping[int, Mapping[str, Counts]]
) -> dict[str, ModelFigures]:
    """A run's figures by model as its outputs showed them: as stored (`figures`, the
    only record of a third-party kind's outcomes, which its report.json lacks), or for a
    run recorded before they were, worked out from its items (`older`, `_item_counts`)."""
    if stored is None:
        return {m: _counted(m, tasks) for m, tasks in older.get(run_id, {}).items()}
    return _restored(path, run_id, _loads(path, run_id, "figures", stored))


def rate(figures: ModelFigures | None) -> dict[str, Any] | None:
    """A model's figures as the commands give them: passed of scored items, errors, the pass
    rate with its 95% interval over tasks, and `shown`, the text every output shows."""
    if figures is None:
        return None
    found = figures.rate
    return {
        "passed": figures.passed,
        "scored": figures.scored,
        "errors": figures.errors,
        "rate": None if found is None else found.estimate,
        "low": None if found is None else found.low,
        "high": None if found is None else found.high,
        "method": None if found is None else found.method,
        "shown": figures.shown_rate,
    }


def _item_counts(db: sqlite3.Connection, run_ids: Sequence[int]) -> dict[int, dict[str, Counts]]:
    """Per run and model: each task's items passed, failed and errored."""
    found: dict[int, dict[str, Counts]] = defaultdict(lambda: defaultdict(dict))
    marks = ", ".join("?" * len(run_ids))
    for run_id, model, kind, task_id, passed, failed, errored in db.execute(
        "SELECT run_id, model, kind, task_id, SUM(outcome = 'pass'), SUM(outcome = 'fail'),"
        f" SUM(outcome = 'error') FROM results WHERE run_id IN ({marks})"
        " GROUP BY run_id, model, kind, task_id",
        list(run_ids),
    ):
        found[run_id][model][(kind, task_id)] = [passed, failed, errored]
    return found


def _task_counts(db: sqlite3.Connection, version: int) -> dict[int, dict[str, list[int]]]:
    """Per run and model: its tasks with a verdict, those meeting the rule, those undecided
    (none in a database from before version 5)."""
    found: dict[int, dict[str, list[int]]] = defaultdict(dict)
    if version < 5:
        return found
    for run_id, model, tasks, met, undecided in db.execute(
        "SELECT run_id, model, COUNT(*), SUM(verdict = 'pass'), SUM(verdict = 'undecided')"
        " FROM task_verdicts GROUP BY run_id, model"
    ):
        found[run_id][model] = [tasks, met, undecided]
    return found


def _tasks_met(rule: str | None, counts: list[int] | None) -> dict[str, Any] | None:
    """A model's tasks against the run's per-task rule as the commands give them: `shown`
    is "9/10 meet 8/10" (with the undecided, which never meet it, named)."""
    if rule is None or counts is None:
        return None
    tasks, met, undecided = counts
    shown = f"{met}/{tasks} meet {rule}" + (f" ({undecided} undecided)" if undecided else "")
    return {"rule": rule, "tasks": tasks, "met": met, "undecided": undecided, "shown": shown}


def runs(path: Path) -> list[dict[str, Any]]:
    """Every run, oldest first: when, its datasets (the files its items came from), models,
    items, exit status, each model's figures (`rate`) as the run's outputs showed them and,
    with trials, its tasks meeting the per-task rule (`tasks_met`)."""
    with reading(path) as (db, version):
        rows = db.execute(
            "SELECT id, started, finished, exit_status, models, items,"
            f" {_columns(version).split(',')[0]}, {'figures' if version >= 4 else 'NULL'},"
            f" {'task_rule' if version >= 5 else 'NULL'} FROM runs ORDER BY id"
        ).fetchall()
        verdicts = _task_counts(db, version)
        files = db.execute(
            "SELECT DISTINCT run_id, substr(nodeid, 1, instr(nodeid, '::') - 1) FROM results"
            " ORDER BY 1, 2"
        ).fetchall()
        older = _item_counts(db, [row[0] for row in rows if row[7] is None])
    datasets: dict[int, list[str]] = {}
    for run_id, file in files:
        datasets.setdefault(run_id, []).append(file)
    listed = []
    for run_id, started, finished, exit_status, models, items, complete, stored, rule in rows:
        names = _loads(path, run_id, "models", models)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise HistoryError(f"{path}: run {run_id} is damaged (its models)")
        figures = _run_figures(path, run_id, stored, older)
        listed.append(
            {
                "id": run_id,
                "started": started,
                "finished": finished,
                "exit_status": exit_status,
                "datasets": datasets.get(run_id, []),
                "models": names,
                "items": items,
                # False: a partial run; None: recorded before runs said so.
                "complete": None if complete is None else bool(complete),
                "pass_rate": {m: rate(figures.get(m)) for m in names},
                "tasks_met": {m: _tasks_met(rule, verdicts[run_id].get(m)) for m in names},
            }
        )
    return listed


Grouping = Literal["model", "category", "task"]


def trend(
    path: Path,
    model: str | None = None,
    category: str | None = None,
    task: str | None = None,
    by: Grouping = "model",
) -> list[dict[str, Any]]:
    """Each model's figures per run (and category or task, `by`), over the scored items that
    match the filters, worked out as `model_figures` works them out; a task matches by its
    id or its node id."""
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
    with reading(path) as (db, _):
        rows = db.execute(
            f"SELECT run_id, started, model, {column}, kind, task_id, SUM(outcome = 'pass'),"
            " SUM(outcome = 'fail') FROM results JOIN runs ON runs.id = run_id"
            f" WHERE {' AND '.join(where)}"
            f" GROUP BY run_id, model, {column}, kind, task_id"
            f" ORDER BY run_id, model, {column}",
            params,
        ).fetchall()
    groups: dict[tuple[int, str, str, str], Counts] = defaultdict(dict)
    for run_id, started, row_model, group, kind, task_id, passed, failed in rows:
        groups[(run_id, started, row_model, group)][(kind, task_id)] = [passed, failed, 0]
    points = []
    for (run_id, started, row_model, group), tasks in groups.items():
        grouped: dict[str, str] = {by: group} if by != "model" else {}
        figures = rate(_counted(row_model, tasks)) or {}
        points.append({"run": run_id, "started": started, "model": row_model, **grouped, **figures})
    return points


def show(path: Path, run: int | Literal["last"]) -> dict[str, Any]:
    """One run: its record's metadata, each model's figures (as `runs` gives them) and every
    item."""
    run_id, report = load_report(path, run)
    with reading(path) as (db, version):
        row = db.execute(
            f"SELECT {'figures' if version >= 4 else 'NULL'} FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
        older = _item_counts(db, [run_id]) if row[0] is None else {}
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
    figures = _run_figures(path, run_id, row[0], older)
    return {
        "id": run_id,
        "partial": meta.partial_line(),
        "started": meta.started,
        "finished": meta.finished,
        "exit_status": meta.exit_status,
        "plugin": meta.plugin,
        "command_line": meta.command_line,
        "models": models,
        # What each name resolved to (`ModelInfo`), and as the baseline table says it.
        "identities": {
            m.name: {**m.model_dump(mode="json"), "said": baseline.describe(m)} for m in meta.models
        },
        "gate": report.gate,
        "pass_rate": {m: rate(figures.get(m)) for m in models},
        "task_rule": report.task_rule,
        "task_verdicts": [v.model_dump(mode="json") for v in report.task_verdicts],
        "items": rows,
    }
