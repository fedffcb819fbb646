"""ax-eval's calibration suites: frozen transcripts, each with the band its judge score should
land in, judged again to measure how lenient the judge is (`docs/judge.md`).

A suite is `{target, task, rubric?, criteria?, prescriptiveness_discount, cases[{name, label,
transcript, expected{min, max}, guidance?}]}` (ax-eval's `src/calibration/mod.rs`), its paths
relative to the suite file and never outside its directory. Each case is judged through the
scenario judge's own path (`judge.run_panel`: its prompt, target, guidance and rubric), and
read as ax-eval reads it: in band when min - 1e-9 ≤ score ≤ max + 1e-9, signed error = score -
band midpoint, leniency index = the mean signed error over the cases that scored. A case whose
judge gave no valid answer (or could not be asked) did not run: counted, never scored.
`calibrate.py` reads the file, tells a suite from a labels file, and sets the exit status.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pytest_llmtool.agents.base import AgentError
from pytest_llmtool.agents.budget import Budget, BudgetExhausted
from pytest_llmtool.agents.judge import (
    Criterion,
    PanelJudge,
    Rubric,
    resolve_rubric,
    run_panel,
    sample_interval,
)
from pytest_llmtool.inputs.lines import read_head
from pytest_llmtool.inputs.safe_yaml import key_path
from pytest_llmtool.kinds.scenario.load import Target
from pytest_llmtool.kinds.scenario.mcp_target import McpTarget
from pytest_llmtool.kinds.scenario.run import judge_target
from pytest_llmtool.records import Interval, LLMCallMetrics

BAND_EPSILON = 1e-9  # ax-eval's: a score exactly on a bound is in band
MAX_TRANSCRIPT_BYTES = 4 * 1024 * 1024  # the judge is shown about 24,000 characters of it


class SuiteError(Exception):
    """The suite as a whole cannot be used (its target, task or rubric); the message names
    the file, line and key."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Band(_Model):
    min: float
    max: float


class _Case(_Model):
    name: str = Field(min_length=1)
    label: str = ""
    transcript: str = Field(min_length=1)
    expected: _Band
    guidance: str | None = None


class _Task(_Model):
    prompt: str = Field(min_length=1)


class _Suite(_Model):
    target: dict[str, Any]
    task: _Task
    rubric: str | None = None
    criteria: list[Criterion] = Field(default_factory=list)
    prescriptiveness_discount: float = Field(default=0.5, ge=0, le=1)
    cases: list[Any]


@dataclass(frozen=True)
class Case:
    """One frozen transcript and the band its score should land in."""

    where: str  # file:line
    name: str
    label: str
    transcript: str
    low: float
    high: float
    guidance: str | None


@dataclass(frozen=True)
class Suite:
    path: Path
    target: str  # as the judge is told it (`judge_target`)
    task: str
    rubric: Rubric
    discount: float
    cases: list[Case]


def is_suite(data: Any) -> bool:
    """A suite is a mapping with `cases:` (a labels file is a list, or has `labels:`)."""
    return isinstance(data, dict) and "cases" in data


def _first(exc: ValidationError, prefix: tuple[Any, ...] = ()) -> str:
    first = exc.errors()[0]
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{key_path((*prefix, *first['loc']))}: {first['msg']}{more}"


def _entry(node: yaml.Node | None, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    """A mapping node's `key` and value nodes."""
    if isinstance(node, yaml.MappingNode):
        return next(((k, v) for k, v in node.value if k.value == key), None)
    return None


def _line(node: yaml.Node | None, key: str) -> int:
    """The line of a mapping's `key` (1-based), else of the document."""
    found = _entry(node, key)
    return 1 if node is None else (found[0] if found else node).start_mark.line + 1


def _target(data: dict[str, Any]) -> str:
    """ax-eval's tagged union: `kind: cli` (the default) or `kind: mcp`."""
    kind = data.get("kind", "cli")
    model: type[Target] | type[McpTarget]
    if kind == "cli":
        model = Target
    elif kind == "mcp":
        model = McpTarget
    else:
        raise ValueError(f"target.kind: {kind!r} is not one of cli, mcp")
    try:
        target = model.model_validate(data)
    except ValidationError as exc:
        raise ValueError(_first(exc, ("target",))) from None
    if isinstance(target, McpTarget) and not target.tools:
        raise ValueError("target.tools: an MCP target declares at least one tool")
    return judge_target(target)


def _inside(base: Path, value: str, key: str) -> Path:
    """The file `value` names under the suite's directory; ValueError when it is absolute or
    resolves (through `..` or a symbolic link) outside it."""
    if Path(value).is_absolute():
        raise ValueError(f"{key}: {value!r} is an absolute path; give one relative to the suite")
    resolved, root = (base / value).resolve(), base.resolve()
    if not resolved.is_relative_to(root):
        raise ValueError(f"{key}: {value!r} resolves outside the suite's directory {root}")
    return resolved


def _read_transcript(base: Path, value: str) -> str:
    path = _inside(base, value, "transcript")
    try:
        raw, size = read_head(path, MAX_TRANSCRIPT_BYTES)
    except OSError as exc:
        raise ValueError(f"transcript: {path} cannot be read: {exc.strerror or exc}") from None
    if size > MAX_TRANSCRIPT_BYTES:
        raise ValueError(f"transcript: {path} is larger than {MAX_TRANSCRIPT_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"transcript: {path} is not UTF-8: {exc}") from None


def _case(data: Any, where: str, base: Path) -> Case:
    if not isinstance(data, dict):
        raise ValueError(f"expected a mapping, got {type(data).__name__}")
    try:
        spec = _Case.model_validate(data)
    except ValidationError as exc:
        raise ValueError(_first(exc)) from None
    low, high = spec.expected.min, spec.expected.max
    for key, bound in (("min", low), ("max", high)):
        if not (math.isfinite(bound) and 0 <= bound <= 1):
            raise ValueError(f"expected.{key}: {bound} is outside 0..1")
    if low > high:
        raise ValueError(f"expected: min {low} is above max {high}")
    transcript = _read_transcript(base, spec.transcript)
    return Case(where, spec.name, spec.label, transcript, low, high, spec.guidance)


def read_suite(path: Path, data: dict[str, Any], node: yaml.Node | None) -> tuple[Suite, list[str]]:
    """The suite and, apart, a `file:line: case 'name': key: problem` for each case that
    cannot be used (the others still run). SuiteError when the suite itself cannot be."""
    base = path.parent
    try:
        spec = _Suite.model_validate(data)
    except ValidationError as exc:
        key = str(exc.errors()[0]["loc"][0]) if exc.errors()[0]["loc"] else ""
        raise SuiteError(f"{path}:{_line(node, key)}: {_first(exc)}") from None
    try:
        target = _target(spec.target)
    except ValueError as exc:
        raise SuiteError(f"{path}:{_line(node, 'target')}: {exc}") from None
    rubric_key = "rubric" if spec.rubric is not None else "criteria"
    try:
        rubric_path = None if spec.rubric is None else _inside(base, spec.rubric, "rubric")
        # ax-eval's order: the rubric file, else the inline criteria, else the default rubric.
        rubric = resolve_rubric(rubric_path, spec.criteria)
    except ValueError as exc:
        raise SuiteError(f"{path}:{_line(node, rubric_key)}: {exc}") from None
    except OSError as exc:
        raise SuiteError(
            f"{path}:{_line(node, 'rubric')}: rubric: {spec.rubric!r} cannot be read: "
            f"{exc.strerror or exc}"
        ) from None
    found = _entry(node, "cases")
    entries = found[1].value if found and isinstance(found[1], yaml.SequenceNode) else []
    cases: list[Case] = []
    problems: list[str] = []
    for index, (entry, entry_node) in enumerate(zip(spec.cases, entries, strict=True)):
        where = f"{path}:{entry_node.start_mark.line + 1}"
        name = entry.get("name") if isinstance(entry, dict) else None
        who = f"case {name!r}" if isinstance(name, str) and name else f"cases[{index}]"
        try:
            case = _case(entry, where, base)
            if any(c.name == case.name for c in cases):
                raise ValueError("name: another case has this name")
            cases.append(case)
        except ValueError as exc:
            problems.append(f"{where}: {who}: {exc}")
    if not spec.cases:
        problems.append(f"{path}:{_line(node, 'cases')}: cases: the suite has no case")
    suite = Suite(path, target, spec.task.prompt, rubric, spec.prescriptiveness_discount, cases)
    return suite, problems


# ------------------------------------------------------------------------------ judging


class Band(BaseModel):
    min: float
    max: float


class CaseOutcome(BaseModel):
    """One case judged. `score` is the judge's weighted score (with samples or a panel, the
    mean over judges of each judge's mean), None when the case did not run (`error` says
    why); `interval` the 95% t interval of one judge's samples; `adjusted_score` and
    `prescriptiveness` (the level) as the judge gave them, informational."""

    name: str
    label: str
    where: str
    expected: Band
    score: float | None = None
    interval: Interval | None = None
    adjusted_score: float | None = None
    prescriptiveness: int | None = None
    signed_error: float | None = None
    in_band: bool | None = None
    error: str | None = None


def in_band(score: float, low: float, high: float) -> bool:
    return low - BAND_EPSILON <= score <= high + BAND_EPSILON


def signed_error(score: float, low: float, high: float) -> float:
    """Score minus the band's midpoint: positive is a judge more lenient than intended."""
    return score - (low + high) / 2


def scored(case: Case, score: float, **extra: Any) -> CaseOutcome:
    """A case's outcome for a score, with ax-eval's figures."""
    return CaseOutcome(
        name=case.name,
        label=case.label,
        where=case.where,
        expected=Band(min=case.low, max=case.high),
        score=score,
        signed_error=signed_error(score, case.low, case.high),
        in_band=in_band(score, case.low, case.high),
        **extra,
    )


def did_not_run(case: Case, error: str) -> CaseOutcome:
    return CaseOutcome(
        name=case.name,
        label=case.label,
        where=case.where,
        expected=Band(min=case.low, max=case.high),
        error=error,
    )


Judges = Callable[[str], Sequence[PanelJudge]]


async def judge_suite(
    suite: Suite, judges: Judges, *, samples: int = 1, budget: Budget | None = None
) -> tuple[list[CaseOutcome], list[LLMCallMetrics]]:
    """Every case judged, one after another, and every call made. A case whose judge cannot
    be asked (a provider error, the cost limit) did not run; the others still do, except
    after the cost limit: the rest did not run either."""
    outcomes: list[CaseOutcome] = []
    calls: list[LLMCallMetrics] = []
    stopped: str | None = None
    for case in suite.cases:
        if stopped is not None:
            outcomes.append(did_not_run(case, stopped))
            continue
        try:
            verdict = await run_panel(
                judges(f"calibrate.{case.name}"),
                suite.rubric,
                task=suite.task,
                transcript=case.transcript,
                threshold=0.0,  # the score is read, not the verdict (as ax-eval does)
                samples=samples,
                budget=budget,
                guidance=case.guidance,
                discount=suite.discount,
                target=suite.target,
            )
        except BudgetExhausted as exc:
            calls += exc.judge_calls
            stopped = f"not judged: {exc}"
            outcomes.append(did_not_run(case, stopped))
            continue
        except AgentError as exc:
            outcomes.append(did_not_run(case, f"the judge could not be asked: {exc}"))
            continue
        calls += verdict.calls
        answers = [v for o in verdict.opinions for v in o.verdicts]
        invalid = sum(v.response is None for v in answers)
        if invalid:
            outcomes.append(
                did_not_run(
                    case, f"{invalid} of {len(answers)} judge answers invalid: {verdict.message}"
                )
            )
            continue
        response = verdict.response
        assert response is not None
        found = sample_interval(verdict.opinions[0].scores) if len(verdict.opinions) == 1 else None
        level = response.prescriptiveness.level if response.prescriptiveness else None
        outcomes.append(
            scored(
                case,
                verdict.score,
                interval=None if found is None else Interval.of(found, "t"),
                adjusted_score=response.adjusted_score,
                prescriptiveness=level,
            )
        )
    return outcomes, calls


# --------------------------------------------------------------------------- the figures


class SuiteCalibration(BaseModel):
    """A suite judged: every case, the counts, the out-of-band cases, the leniency index
    (None when no case scored), and the exit status `calibrate.py` gives it."""

    suite: str
    format: str = "ax-eval"
    judge_models: list[str]
    samples: int
    cases: list[CaseOutcome]
    problems: list[str] = Field(default_factory=list)
    scored: int
    in_band: int
    did_not_run: int
    out_of_band: list[str]
    leniency_index: float | None
    status: int = 0
    reason: str = ""
    calls: int = 0
    cost_usd: float | None = None


def suite_calibration(
    path: Path,
    outcomes: Sequence[CaseOutcome],
    problems: Sequence[str],
    models: Sequence[str],
    samples: int,
    calls: Sequence[LLMCallMetrics],
) -> SuiteCalibration:
    errors = [o.signed_error for o in outcomes if o.signed_error is not None]
    costs = [c.cost_usd for c in calls]
    return SuiteCalibration(
        suite=str(path),
        judge_models=list(models),
        samples=samples,
        cases=list(outcomes),
        problems=list(problems),
        scored=len(errors),
        in_band=sum(bool(o.in_band) for o in outcomes),
        did_not_run=sum(o.score is None for o in outcomes),
        out_of_band=[o.name for o in outcomes if o.in_band is False],
        leniency_index=math.fsum(errors) / len(errors) if errors else None,
        calls=len(calls),
        cost_usd=None if None in costs else math.fsum(c for c in costs if c is not None),
    )


def _cell(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def suite_lines(found: SuiteCalibration) -> list[str]:
    """ax-eval's table (case, target band, score, adjusted, signed, prescriptiveness, in
    band) with our interval and label, then the counts, the leniency index and the status."""
    from pytest_llmtool.report.terminal import format_table

    said = [*found.problems]
    how = "" if len(found.judge_models) == 1 and found.samples == 1 else ", score: the mean"
    said.append(
        f"judge {', '.join(found.judge_models)} ({found.samples} samples{how}) on "
        f"{len(found.cases)} cases of {found.suite}: {found.calls} calls"
        + ("" if found.cost_usd is None else f", ${found.cost_usd:.4f}")
    )
    rows = []
    for o in found.cases:
        band = f"{o.expected.min:.2f}-{o.expected.max:.2f}"
        if o.score is None:
            rows.append([o.name, band, "err", "-", "-", "-", "err", "-", o.label])
            continue
        interval = "-" if o.interval is None else f"[{o.interval.low:.2f}, {o.interval.high:.2f}]"
        presc = "-" if o.prescriptiveness is None else str(o.prescriptiveness)
        rows.append(
            [
                o.name,
                band,
                f"{o.score:.2f}",
                _cell(o.adjusted_score, ".2f"),
                _cell(o.signed_error, "+.2f"),
                presc,
                "yes" if o.in_band else "NO",
                interval,
                o.label,
            ]
        )
    headers = ["Case", "Target", "Score", "Adj", "Signed", "Presc", "In band", "95% CI", "Label"]
    said += format_table(headers, rows)
    said += [f"{o.name}: did not run: {o.error}" for o in found.cases if o.error]
    said.append(
        f"In band: {found.in_band}/{found.scored} scored ({found.did_not_run} case(s) did not run)"
    )
    said.append(
        "Leniency index: n/a (no cases scored)"
        if found.leniency_index is None
        else f"Leniency index (mean signed error): {found.leniency_index:+.3f} "
        "(positive = judge scores above target)"
    )
    if found.reason:
        said.append(f"llmtool judge: {found.reason} (exit status {found.status})")
    return said
