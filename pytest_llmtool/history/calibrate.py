"""Agreement with people: a labels file of transcripts a person has scored, judged again, and
the statistics that say how far the judge can be trusted (`docs/judge.md`); or an ax-eval
calibration suite, told apart by its content (`suite.py`), with ax-eval's figures.

`llmtool judge calibrate LABELS --judge-model=M` and a pytest run with
`--llm-judge-labels=LABELS` do the same: each label's transcript is judged (`judge.run_panel`,
so samples and panels apply), once more with the rubric's criteria in reverse order (order
bias), and compared with the person's scores and verdict per criterion and overall.
`--llm-judge-min-agreement` turns that into a gate: `EXIT_DRIFT` when the judge is below it,
`EXIT_UNDECIDED` when there are too few labels (or a statistic is undefined) to tell.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pytest_llmtool.agents.base import Agent, ModelSpec, NamedWork
from pytest_llmtool.agents.budget import Budget
from pytest_llmtool.agents.judge import (
    PanelJudge,
    PanelVerdict,
    Rubric,
    Transcript,
    load_rubric,
    run_panel,
    sample_work_id,
    trace_entries,
)
from pytest_llmtool.agents.registry import ClientPool
from pytest_llmtool.history.suite import (
    Judges,
    Suite,
    SuiteCalibration,
    SuiteError,
    is_suite,
    judge_suite,
    read_suite,
    suite_calibration,
    suite_lines,
)
from pytest_llmtool.inputs.safe_yaml import UnsafeYaml, key_path, load_yaml
from pytest_llmtool.records import AgentTrace, Interval

if TYPE_CHECKING:
    from pytest_llmtool.run.state import RunState
from pytest_llmtool.stats.agreement import cohen_kappa, krippendorff_alpha, leniency, raw_agreement

EXIT_UNDECIDED = 7  # as the regression gate's: a gate cannot pass what it could not measure
EXIT_DRIFT = 9  # the judge agrees with the labels less than asked, or a suite's case is out of band
EXIT_BAD_LABELS = 2  # some label or case could not be read (the rest were still judged)
# Below this many labels no agreement figure means much: a gate on them cannot decide.
MIN_LABELS = 5
OVERALL = "(verdict)"
GATE_METRICS = ("agreement", "kappa", "alpha")


# ---------------------------------------------------------------------------- labels file


class _LabelItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    report: str
    nodeid: str


class _LabelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    task: str = ""
    transcript: str | None = None
    item: _LabelItem | None = None
    rubric: str | dict[str, Any]
    pass_threshold: float = Field(default=0.7, ge=0, le=1)
    scores: dict[str, float]
    verdict: Literal["pass", "fail"]


@dataclass(frozen=True)
class Label:
    """One transcript a person judged: their score per criterion and their verdict."""

    where: str  # file:line
    id: str
    task: str
    transcript: Transcript
    rubric: Rubric
    threshold: float
    scores: dict[str, float]
    passed: bool


class LabelsError(Exception):
    """The labels file as a whole cannot be read."""


def _rubric(spec: str | dict[str, Any], base: Path) -> Rubric:
    if isinstance(spec, str):
        return load_rubric(base / spec)
    try:
        return Rubric.model_validate(spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ValueError(f"rubric.{key_path(first['loc'])}: {first['msg']}") from None


def _report_transcript(item: _LabelItem, base: Path) -> Transcript:
    """The transcript of an item of an earlier run's report.json, by node id: its trace's
    entries, as its run's judge read them, or the transcript its artifacts kept."""
    path = base / item.report
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"item.report: {path} cannot be read: {exc}") from None
    lists = [v for v in report.values() if isinstance(v, list)] if isinstance(report, dict) else []
    for entry in (e for found in lists for e in found if isinstance(e, dict)):
        if entry.get("nodeid") != item.nodeid:
            continue
        if isinstance(entry.get("trace"), dict):
            return trace_entries(AgentTrace.model_validate(entry["trace"]))
        if isinstance(entry.get("artifacts"), str):
            try:
                return (Path(entry["artifacts"]) / "transcript.txt").read_text(encoding="utf-8")
            except OSError as exc:
                raise ValueError(f"item: the transcript of {item.nodeid} is gone: {exc}") from None
        raise ValueError(f"item: {item.nodeid} in {path} has no transcript")
    raise ValueError(f"item.nodeid: no item {item.nodeid!r} in {path}")


def _label(data: Any, where: str, base: Path) -> Label:
    if not isinstance(data, dict):
        raise ValueError(f"expected a mapping, got {type(data).__name__}")
    try:
        spec = _LabelSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ValueError(f"{key_path(first['loc'])}: {first['msg']}{more}") from None
    if (spec.transcript is None) == (spec.item is None):
        raise ValueError("give exactly one of transcript or item (report and nodeid)")
    rubric = _rubric(spec.rubric, base)
    missing = [cid for cid in rubric.ids if cid not in spec.scores]
    extra = [cid for cid in spec.scores if cid not in rubric.ids]
    if missing or extra:
        raise ValueError(
            "scores: "
            + "; ".join(
                [f"missing {', '.join(missing)}"] * bool(missing)
                + [f"not in the rubric: {', '.join(extra)}"] * bool(extra)
            )
        )
    for cid, score in spec.scores.items():
        if not (math.isfinite(score) and 0 <= score <= 1):
            raise ValueError(f"scores.{cid}: {score} is outside 0..1")
    transcript: Transcript | None = spec.transcript
    if spec.item is not None:
        transcript = _report_transcript(spec.item, base)
    assert transcript is not None
    return Label(
        where=where,
        id=spec.id or where,
        task=spec.task,
        transcript=transcript,
        rubric=rubric,
        threshold=spec.pass_threshold,
        scores=spec.scores,
        passed=spec.verdict == "pass",
    )


def _yaml(path: Path, text: str) -> tuple[Any, yaml.Node | None]:
    try:
        return load_yaml(text), yaml.compose(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, UnsafeYaml) as exc:
        raise LabelsError(f"{path}: not valid YAML: {exc}") from None


def _entries(path: Path, text: str) -> list[tuple[int, Any]]:
    """Each label with its line: JSONL one per line (blank lines and `#` comments skipped),
    YAML a list of mappings (or a mapping with `labels:`)."""
    if path.suffix == ".jsonl":
        found: list[tuple[int, Any]] = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("#"):
                try:
                    found.append((number, json.loads(line)))
                except ValueError as exc:
                    found.append((number, ValueError(f"not valid JSON: {exc}")))
        return found
    data, node = _yaml(path, text)
    if isinstance(data, dict) and "labels" in data and node is not None:
        data = data["labels"]
        node = next(v for k, v in node.value if k.value == "labels")
    if not isinstance(data, list) or node is None:
        shape = (
            f"a mapping with keys {', '.join(map(str, data))}"
            if isinstance(data, dict)
            else f"a {type(data).__name__}"
        )
        raise LabelsError(
            f"{path}: neither a labels file (a list of labels, or a mapping with labels:) "
            f"nor an ax-eval calibration suite (a mapping with cases:); found {shape}"
        )
    return [(n.start_mark.line + 1, d) for n, d in zip(node.value, data, strict=True)]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LabelsError(f"{path}: cannot be read: {exc}") from None


def load_labels(path: Path) -> tuple[list[Label], list[str]]:
    """The labels and, apart, a `file:line: problem` for each one that cannot be used."""
    labels, problems = [], []
    for line, data in _entries(path, _read(path)):
        where = f"{path}:{line}"
        try:
            if isinstance(data, ValueError):
                raise data
            labels.append(_label(data, where, path.parent))
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
    return labels, problems


def load_calibration(path: Path) -> tuple[list[Label] | Suite, list[str]]:
    """A labels file's labels, or an ax-eval suite (told apart by content: a YAML mapping
    with `cases:`), and a `file:line: problem` for each label or case that cannot be used.
    LabelsError when the file as a whole cannot be."""
    if path.suffix != ".jsonl":
        data, node = _yaml(path, _read(path))
        if is_suite(data):
            try:
                return read_suite(path, data, node)
            except SuiteError as exc:
                raise LabelsError(str(exc)) from None
    return load_labels(path)


# ------------------------------------------------------------------------------ judging


@dataclass(frozen=True)
class Judged:
    """A label and what the judge made of it, in the rubric's order and reversed."""

    label: Label
    forward: PanelVerdict
    reversed: PanelVerdict | None


def panel_for(models: Sequence[ModelSpec], trial: int = 0) -> Judges:
    """For each work id, the panel of `models` with one recording id per sample."""

    def judges(work: str) -> list[PanelJudge]:
        def agent(spec: ModelSpec) -> Callable[[int], Agent]:
            return lambda sample: spec.create(NamedWork(sample_work_id(work, sample)), trial)

        return [PanelJudge(spec.name, agent(spec), spec.price) for spec in models]

    return judges


async def judge_labels(
    labels: Sequence[Label],
    judges: Judges,
    *,
    samples: int = 1,
    order_check: bool = True,
    budget: Budget | None = None,
) -> list[Judged]:
    """Judge every label's transcript; with `order_check`, again with the criteria reversed."""
    judged = []
    for label in labels:
        common: dict[str, Any] = {
            "task": label.task,
            "transcript": label.transcript,
            "threshold": label.threshold,
            "samples": samples,
            "budget": budget,
        }
        forward = await run_panel(judges(f"calibrate.{label.id}"), label.rubric, **common)
        backward = None
        if order_check and len(label.rubric.criteria) > 1:
            flipped = Rubric(
                criteria=list(reversed(label.rubric.criteria)), output=label.rubric.output
            )
            backward = await run_panel(judges(f"calibrate.{label.id}.reversed"), flipped, **common)
        judged.append(Judged(label, forward, backward))
    return judged


# --------------------------------------------------------------------------- statistics


class CriterionAgreement(BaseModel):
    """How one criterion's judge scores (or, for `(verdict)`, the verdict and weighted score)
    compare with the person's. `agreement` and `kappa` are over pass/fail (a criterion passes
    at the label's threshold; the verdict is the judge's decision, inconclusive its own
    category), `alpha` Krippendorff's interval alpha over the scores, `leniency` the mean of
    judge minus person, `order_bias` the mean absolute change of the score when the rubric's
    criteria are given in reverse order. None where undefined (see `agreement.py`)."""

    criterion: str
    labels: int
    agreement: float | None = None
    kappa: float | None = None
    alpha: float | None = None
    leniency: Interval | None = None
    order_bias: float | None = None


class Calibration(BaseModel):
    """The judge against the labels: per criterion and overall, and the gate's verdict."""

    judge_models: list[str]
    samples: int
    labels: int
    problems: list[str] = Field(default_factory=list)
    criteria: list[CriterionAgreement] = Field(default_factory=list)
    gate: str | None = None
    status: int = 0
    reason: str = ""
    calls: int = 0
    cost_usd: float | None = None


def _row(
    name: str,
    judge: Sequence[float],
    human: Sequence[float],
    judge_class: Sequence[str],
    human_class: Sequence[str],
    flipped: Sequence[tuple[float, float]],
) -> CriterionAgreement:
    found = leniency(judge, human)
    return CriterionAgreement(
        criterion=name,
        labels=len(judge),
        agreement=raw_agreement(judge_class, human_class),
        kappa=cohen_kappa(judge_class, human_class),
        alpha=krippendorff_alpha([[j, h] for j, h in zip(judge, human, strict=True)]),
        leniency=Interval.of(found, "t") if found else None,
        order_bias=(math.fsum(abs(a - b) for a, b in flipped) / len(flipped) if flipped else None),
    )


def agreement_rows(judged: Sequence[Judged]) -> list[CriterionAgreement]:
    """One row per criterion id (over the labels whose rubric has it), then `(verdict)`."""
    ids = list(dict.fromkeys(cid for j in judged for cid in j.label.rubric.ids))
    rows = []
    for cid in ids:
        having = [j for j in judged if cid in j.label.rubric.ids]
        judge = [j.forward.criterion_means[cid] for j in having]
        human = [j.label.scores[cid] for j in having]
        rows.append(
            _row(
                cid,
                judge,
                human,
                [_side(s, j.label.threshold) for s, j in zip(judge, having, strict=True)],
                [_side(s, j.label.threshold) for s, j in zip(human, having, strict=True)],
                [
                    (j.forward.criterion_means[cid], j.reversed.criterion_means[cid])
                    for j in having
                    if j.reversed is not None
                ],
            )
        )
    human_weighted = [
        math.fsum(c.weight * j.label.scores[c.id] for c in j.label.rubric.criteria) for j in judged
    ]
    rows.append(
        _row(
            OVERALL,
            [j.forward.score for j in judged],
            human_weighted,
            [j.forward.decision for j in judged],
            ["pass" if j.label.passed else "fail" for j in judged],
            [(j.forward.score, j.reversed.score) for j in judged if j.reversed is not None],
        )
    )
    return rows


def _side(score: float, threshold: float) -> str:
    return "pass" if score >= threshold else "fail"


def parse_gate(text: str) -> dict[str, float]:
    """`0.8` (agreement) or `agreement=0.8,kappa=0.6,alpha=0.7`; ValueError when malformed."""
    found: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        metric, sep, value = part.rpartition("=")
        metric = metric.strip() if sep else "agreement"
        if metric not in GATE_METRICS:
            raise ValueError(f"unknown metric {metric!r} (one of {', '.join(GATE_METRICS)})")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not -1 <= number <= 1:
            raise ValueError(f"{metric}: expected a number from -1 to 1, got {value.strip()!r}")
        found[metric] = number
    if not found:
        raise ValueError("name at least one metric=value")
    return found


def apply_gate(calibration: Calibration, gate: dict[str, float]) -> None:
    """Set the calibration's status: drift below a minimum, undecided with too few labels or
    an undefined figure (fails closed), else 0; bad label lines make an otherwise clean run
    exit `EXIT_BAD_LABELS`."""
    overall = next((r for r in calibration.criteria if r.criterion == OVERALL), None)
    if calibration.labels < MIN_LABELS or overall is None:
        calibration.status = EXIT_UNDECIDED
        calibration.reason = (
            f"cannot decide: {calibration.labels} usable labels, at least {MIN_LABELS} needed"
        )
        return
    below, undefined = [], []
    for metric, minimum in gate.items():
        value = getattr(overall, metric)
        if value is None:
            undefined.append(f"{metric} is undefined (e.g. every verdict the same)")
        elif value < minimum:
            below.append(f"{metric} {value:.2f} < {minimum:g}")
    if below:
        calibration.status = EXIT_DRIFT
        calibration.reason = "judge drifted from the labels: " + "; ".join(below)
    elif undefined:
        calibration.status = EXIT_UNDECIDED
        calibration.reason = "cannot decide: " + "; ".join(undefined)
    else:
        met = ", ".join(f"{m} >= {v:g}" for m, v in gate.items())
        calibration.reason = f"judge agrees with the labels ({met})"


def calibration(
    judged: Sequence[Judged],
    problems: Sequence[str],
    models: Sequence[str],
    samples: int,
    gate: dict[str, float] | None,
) -> Calibration:
    calls = [c for j in judged for v in (j.forward, j.reversed) if v for c in v.calls]
    costs = [c.cost_usd for c in calls]
    found = Calibration(
        judge_models=list(models),
        samples=samples,
        labels=len(judged),
        problems=list(problems),
        criteria=agreement_rows(judged) if judged else [],
        gate=None if gate is None else ",".join(f"{m}={v:g}" for m, v in gate.items()),
        calls=len(calls),
        cost_usd=None if None in costs else math.fsum(c for c in costs if c is not None),
    )
    if gate is not None:
        apply_gate(found, gate)
    if found.status == 0 and problems:
        found.status = EXIT_BAD_LABELS
        found.reason = f"{len(problems)} labels could not be read"
    return found


def apply_bands(found: SuiteCalibration) -> None:
    """A suite's exit status: drift when a scored case is out of band (ax-eval exits non-zero
    then), undecided when no case scored or one did not run (fails closed: a case not judged
    is not in band), else 0; cases that could not be read make an otherwise clean run exit
    `EXIT_BAD_LABELS`."""
    if found.out_of_band:
        found.status = EXIT_DRIFT
        found.reason = (
            f"judge out of band on {len(found.out_of_band)} of {found.scored} scored cases: "
            + ", ".join(found.out_of_band)
        )
    elif not found.scored:
        found.status = EXIT_UNDECIDED
        found.reason = "cannot decide: no case scored"
    elif found.did_not_run:
        found.status = EXIT_UNDECIDED
        found.reason = f"cannot decide: {found.did_not_run} case(s) did not run"
    elif found.problems:
        found.status = EXIT_BAD_LABELS
        found.reason = f"{len(found.problems)} cases could not be read"
    else:
        found.reason = f"every case in band ({found.in_band}/{found.scored})"


# ------------------------------------------------------------------------------ output


def _num(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def lines(found: Calibration | SuiteCalibration) -> list[str]:
    """The table a person reads: one row per criterion, then the verdict row, then the gate
    (a suite's: one row per case, then its counts and leniency index)."""
    from pytest_llmtool.report.terminal import format_table

    if isinstance(found, SuiteCalibration):
        return suite_lines(found)
    said = [*found.problems]
    said.append(
        f"judge {', '.join(found.judge_models)} ({found.samples} samples) on {found.labels} "
        f"labels: {found.calls} calls"
        + ("" if found.cost_usd is None else f", ${found.cost_usd:.4f}")
    )
    rows = [
        [
            r.criterion,
            str(r.labels),
            _num(r.agreement),
            _num(r.kappa),
            _num(r.alpha),
            "-"
            if r.leniency is None
            else f"{r.leniency.estimate:+.2f} [{r.leniency.low:+.2f}, {r.leniency.high:+.2f}]",
            _num(r.order_bias),
        ]
        for r in found.criteria
    ]
    headers = ["Criterion", "Labels", "Agreement", "Kappa", "Alpha", "Leniency", "Order bias"]
    said += format_table(headers, rows)
    if found.reason:
        said.append(f"llmtool judge: {found.reason} (exit status {found.status})")
    return said


# ------------------------------------------------------------------ command line and pytest


def models_named(names: Sequence[str]) -> tuple[list[ModelSpec], ClientPool]:
    """Judge models by name (the model table of `./pyproject.toml` and the aliases, as in
    the plugin) and the client pool they share; the SDKs take a proxy from
    ANTHROPIC_BASE_URL / OPENAI_BASE_URL. ValueError for a name that is unknown, offline, or
    whose key is not in the environment, or a bad table."""
    import os
    from pathlib import Path

    from pytest_llmtool.agents.base import UnknownModel
    from pytest_llmtool.agents.models import ModelEntry, problems, read_tables
    from pytest_llmtool.agents.pricing import DEFAULT_PRICES, find_price
    from pytest_llmtool.agents.registry import build_model, parse_aliases, resolve
    from pytest_llmtool.agents.retry import RetryPolicy

    pool = ClientPool({})
    table: dict[str, str | ModelEntry] = {
        **parse_aliases([]),
        **read_tables([Path("pyproject.toml")], None),
    }
    models = []
    for name in names:
        try:
            ref = resolve(name, table)
        except UnknownModel as exc:
            raise ValueError(f"--judge-model: {exc}") from None
        if ref.provider == "offline":
            raise ValueError(f"--judge-model: {name!r}: a judge must be a real model")
        if ref.key_env and not os.environ.get(ref.key_env):
            raise ValueError(f"--judge-model={name} needs {ref.key_env} in the environment")
        for problem in problems(name, ref.setup, os.environ):
            raise ValueError(f"--judge-model={name}: {problem}")
        models.append(
            build_model(
                ref,
                price=ref.setup.price or find_price(ref.model_id, DEFAULT_PRICES),
                pool=pool,
                policy=RetryPolicy(),
                prompt_cache=True,
                record=None,
                replay=None,
            )
        )
    return models, pool


async def check_file(
    path: Path,
    loaded: tuple[list[Label] | Suite, list[str]],
    judges: Judges,
    names: Sequence[str],
    *,
    samples: int,
    gate: dict[str, float] | None,
    order_check: bool = True,
    budget: Budget | None = None,
) -> Calibration | SuiteCalibration:
    """Judge what `load_calibration` read from a labels file or a suite, and give its
    figures and exit status; ValueError when it cannot be judged (the message says why)."""
    found, problems = loaded
    if isinstance(found, Suite):
        if gate is not None:
            raise ValueError(
                f"{path} is an ax-eval calibration suite: its bands are its gate, and a "
                "minimum agreement applies to a labels file only"
            )
        outcomes, calls = await judge_suite(found, judges, samples=samples, budget=budget)
        result = suite_calibration(path, outcomes, problems, names, samples, calls)
        apply_bands(result)
        return result
    judged = await judge_labels(
        found, judges, samples=samples, order_check=order_check, budget=budget
    )
    return calibration(judged, problems, names, samples, gate)


def run_command(
    path: Path,
    names: Sequence[str],
    *,
    samples: int,
    gate: dict[str, float] | None,
    max_cost: float | None,
    order_check: bool,
) -> Calibration | SuiteCalibration:
    """`llmtool judge calibrate`: `check_file` with the judge models named."""
    import asyncio

    loaded = load_calibration(path)
    models, pool = models_named(names)

    async def go() -> Calibration | SuiteCalibration:
        try:
            return await check_file(
                path,
                loaded,
                panel_for(models),
                names,
                samples=samples,
                gate=gate,
                order_check=order_check,
                budget=Budget(max_cost),
            )
        finally:
            await pool.aclose()

    return asyncio.run(go())


class CalibrationCheck:
    """`--llm-judge-labels` in a pytest run: judged at the end of the session (after the
    items, under the run's budget); a failing gate (a suite's: a case out of band or not
    run) or a label or case that cannot be read sets the exit status, unless the run already
    failed in another way (errors, interrupts)."""

    def __init__(self, path: Path, gate: dict[str, float] | None, state: RunState) -> None:
        self.state = state
        self.path = path
        self.gate = gate
        self.result: Calibration | SuiteCalibration | None = None
        self.error: str | None = None

    def pytest_sessionfinish(self, session: Any) -> None:
        import pytest

        state = self.state
        settings = state.settings
        try:
            judges = [state.judge_named(name) for name in settings.judge_models]
            loaded = load_calibration(self.path)
            self.result = state.runtime.run(
                check_file(
                    self.path,
                    loaded,
                    panel_for([j for j in judges if j is not None]),
                    settings.judge_models,
                    samples=settings.judge_samples,
                    gate=self.gate,
                    budget=state.budget,
                )
            )
            status = self.result.status
        except Exception as exc:  # an unreadable file, a judge error: the check failed
            self.error = f"judge calibration failed: {exc}"
            status = EXIT_UNDECIDED
        codes = pytest.ExitCode
        if session.exitstatus in (codes.OK, codes.TESTS_FAILED, codes.NO_TESTS_COLLECTED):
            if status:
                session.exitstatus = status
            elif session.exitstatus == codes.NO_TESTS_COLLECTED:  # a run over labels alone
                session.exitstatus = codes.OK

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_sep("=", "llmtool judge calibration")
        said = lines(self.result) if self.result else [self.error or "not run"]
        for line in said:
            terminalreporter.write_line(line)
