"""This run against a baseline run: paired change per model, and whether it is a regression.

Pure functions over `outcomes.Outcome` rows. Per model, the tasks both runs scored are paired
(node id without the trial suffix, within a kind), attempts averaged per task. The decision
rule is the one every comparison uses (docs/results.md; `compare.verdict_line`): the paired
test of (current - baseline) pass rate gives p < 0.05, and the interval shown is the one that
test inverts, so it excludes 0 exactly then: a regression when the rate fell, an improvement
when it rose. Anything else is "no detectable change", even when the point estimate moved,
said with the smallest change the shared tasks could have detected.

Each model's identity (what its name resolved to: provider, model id, endpoint, parameters)
is compared too: an alias that now means another model makes the comparison one between two
models, which the notes say and the gate does not pass unless allowed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

from pytest_llmtool import stats
from pytest_llmtool.records import BaselineChange, BaselineComparison, Interval, ModelInfo
from pytest_llmtool.stats import intervals
from pytest_llmtool.stats.compare import TESTS, verdict_line
from pytest_llmtool.stats.outcomes import Outcome

Key = tuple[str, str]  # (kind, task)


def _by_task(rows: Iterable[Outcome], model: str) -> tuple[dict[Key, list[Outcome]], set[Key]]:
    """A model's scored attempts per task, and every task it has (errored ones included)."""
    scored: dict[Key, list[Outcome]] = {}
    seen: set[Key] = set()
    for row in rows:
        if row.model != model:
            continue
        key = (row.kind, row.task)
        seen.add(key)
        if row.passed is not None:
            scored.setdefault(key, []).append(row)
    return scored, seen


def _mean(values: Iterable[float]) -> float:
    listed = list(values)
    return math.fsum(listed) / len(listed)


def _verdict(change: BaselineChange, needed: int | None) -> tuple[bool, str]:
    interval, p = change.pass_rate_change, change.mcnemar_p
    if interval is None or p is None:
        return False, "no shared tasks to compare"
    test = TESTS["tango" if interval.method == "tango" else "paired-t"]
    found = None
    if p < stats.ALPHA:  # the interval excludes 0: the rate fell or rose beyond noise
        found = "regression" if interval.estimate < 0 else "improvement"
    return found == "regression", verdict_line(found, interval, p, test, needed, "change")


def compare_model(
    current: Sequence[Outcome], baseline: Sequence[Outcome], model: str
) -> BaselineChange:
    """One model of both runs over the tasks both scored."""
    now, now_seen = _by_task(current, model)
    then, then_seen = _by_task(baseline, model)
    shared = [key for key in now if key in then]
    now_rate = {key[1]: _mean(float(bool(r.passed)) for r in now[key]) for key in shared}
    then_rate = {key[1]: _mean(float(bool(r.passed)) for r in then[key]) for key in shared}
    now_score = {key[1]: _mean(r.rate or 0.0 for r in now[key]) for key in shared}
    then_score = {key[1]: _mean(r.rate or 0.0 for r in then[key]) for key in shared}
    worse = [task for task in now_rate if now_rate[task] < then_rate[task]]
    better = [task for task in now_rate if now_rate[task] > then_rate[task]]
    test = stats.paired_rates(now_rate, then_rate)
    scores = stats.paired_rates(now_score, then_score)
    pass_change = None if test is None else intervals.paired(test)
    detectable = None if test is None else stats.detectable_change(test, now_rate, then_rate)
    change = BaselineChange(
        model=model,
        tasks=len(shared),
        run_tasks=len(now_seen),
        baseline_pass_rate=_mean(then_rate.values()) if shared else 0.0,
        current_pass_rate=_mean(now_rate.values()) if shared else 0.0,
        pass_rate_change=pass_change,
        score_change=None if scores is None else intervals.paired(scores),
        mcnemar_p=None if test is None else test.p,
        detectable_change=detectable,
        worse=worse,
        better=better,
        added=sorted(task for kind, task in now_seen - then_seen),
        removed=sorted(task for kind, task in then_seen - now_seen),
        regressed=False,
        verdict="",
    )
    needed = None if test is None else stats.tasks_to_detect(test, now_rate, then_rate)
    change.regressed, change.verdict = _verdict(change, needed)
    return change


def _sent(info: ModelInfo) -> list[str]:
    """The parameters and setup a model's calls carry, in words (only what was set)."""
    params = info.params
    if params is None:
        return []
    said = [
        f"{label} {value:g}" if isinstance(value, float | int) else f"{label} {value}"
        for label, value in (
            ("temperature", params.temperature),
            ("max tokens", params.max_tokens),
            ("top p", params.top_p),
            ("reasoning effort", params.reasoning_effort),
            ("thinking budget", params.thinking_budget),
        )
        if value is not None and not isinstance(value, bool)
    ]
    if params.stream is not None:
        said.append("streamed" if params.stream else "not streamed")
    if params.extra_body:
        said.append(f"extra body {json.dumps(params.extra_body, sort_keys=True)}")
    if params.keep_reasoning is False:  # the user's switch; by default nothing is said
        said.append("reasoning dropped")
    if info.headers:
        said.append(f"headers {', '.join(info.headers)}")
    return said


def describe(info: ModelInfo, known: bool = True) -> str:
    """What a model's name resolved to: `openai:weak-1 @ http://host/v1 (temperature 0)`;
    only provider and model id when the rest is not `known` (an older record)."""
    said = f"{info.provider}:{info.model_id}"
    if not known or not info.resolved:
        return said
    if info.client:
        said += f" via {info.client}"
    if info.endpoint:
        said += f" @ {info.endpoint}"
    if info.agent:
        said += f" under {info.agent} {info.agent_version or '(version unknown)'}"
    sent = _sent(info)
    return said + (f" ({', '.join(sent)})" if sent else "")


def _identity(
    change: BaselineChange, now: ModelInfo | None, then: ModelInfo | None
) -> BaselineChange:
    """`change` with both identities, how they differ, and what the baseline did not record.
    Two records with digests compare them (any change of protocol, model id, endpoint,
    parameters, client or headers); an older baseline is compared on what it has, and what it
    lacks is said unknown, never taken for a difference."""
    change.identity, change.baseline_identity = now, then
    if now is None:
        return change
    if then is None:
        change.identity_unknown = ["identity"]
        return change
    if then.digest is not None and now.digest is not None:
        differs = then.digest != now.digest
    elif then.resolved or not now.resolved:
        differs = (now.provider, now.model_id, now.endpoint, now.params) != (
            then.provider,
            then.model_id,
            then.endpoint,
            then.params,
        )
        if then.resolved and now.digest is not None:  # recorded before the model table
            change.identity_unknown = ["client and headers"]
    else:
        differs = (now.provider, now.model_id) != (then.provider, then.model_id)
        if now.params is not None:  # a model the plugin calls: endpoint and params matter
            change.identity_unknown = ["endpoint", "parameters"]
    if differs:
        known = then.resolved
        said_then, said_now = describe(then), describe(now, known)
        if said_then == said_now:  # what differs is not shown in words: say so
            said_now += f" (identity {now.digest or '?'} was {then.digest or '?'})"
        change.identity_change = f"{change.model} was {said_then}, now {said_now}"
    return change


def compare(
    current: Sequence[Outcome],
    baseline: Sequence[Outcome],
    models: Sequence[str],
    ref: str,
    source: str,
    run_id: int | None = None,
    gate: bool = False,
    identities: tuple[Sequence[ModelInfo], Sequence[ModelInfo]] = ((), ()),
) -> BaselineComparison:
    """Each of `models` (this run's, in its order) that the baseline ran too; `identities`
    are both runs' `metadata.models` (this run's, the baseline's)."""
    theirs = {row.model for row in baseline}
    now = {info.name: info for info in identities[0]}
    then = {info.name: info for info in identities[1]}
    return BaselineComparison(
        ref=ref,
        source=source,
        run_id=run_id,
        models=[
            _identity(compare_model(current, baseline, m), now.get(m), then.get(m))
            for m in models
            if m in theirs
        ],
        unmatched=[m for m in models if m not in theirs],
        gate=gate,
    )


def _signed(interval: Interval | None) -> str:
    return "-" if interval is None else intervals.show_difference(interval)


def _named(c: BaselineChange) -> str:
    """`cand = openai:weak-1 @ http://…`, and what it was when that changed."""
    if c.identity is None or c.identity.provider == "offline":
        return c.model
    said = f"{c.model} = {describe(c.identity)}"
    if c.identity_change is not None and c.baseline_identity is not None:
        said += f" (was {describe(c.baseline_identity)})"
    return said


def _power(c: BaselineChange) -> str:
    if c.detectable_change is None:
        return "too few to detect any change"
    return f"changes under ±{100 * c.detectable_change:.0f} pp cannot be seen"


def change_rows(comparison: BaselineComparison) -> tuple[list[str], list[list[str]]]:
    """One row per model: shared tasks, both pass rates, the paired changes, the flips."""
    headers = ["Model", "Tasks", "Baseline", "Now", "Pass rate change (95% CI)"]
    headers += ["Score change (95% CI)", "p", "Detectable", "Worse", "Better", "Verdict"]
    rows = [
        [
            _named(c),
            str(c.tasks),
            intervals.percent(c.baseline_pass_rate),
            intervals.percent(c.current_pass_rate),
            _signed(c.pass_rate_change),
            _signed(c.score_change),
            "-" if c.mcnemar_p is None else f"{c.mcnemar_p:.2g}",
            "none" if c.detectable_change is None else f"±{100 * c.detectable_change:.0f} pp",
            str(len(c.worse)),
            str(len(c.better)),
            c.verdict.replace("regression", "REGRESSION", 1),
        ]
        for c in comparison.models
    ]
    return headers, rows


def _identity_notes(comparison: BaselineComparison, c: BaselineChange) -> list[str]:
    lines = []
    if c.identity_change is not None:
        if comparison.model_change_allowed:
            why = "compared all the same (--llm-allow-model-change)"
        else:
            why = "two models, not one model's change"
            if comparison.gate:
                why += ": the gate does not pass it (--llm-allow-model-change compares them)"
        lines.append(f"{c.identity_change}: {why}")
    if c.identity_unknown:
        what = (
            "the rest"
            if c.baseline_identity and c.baseline_identity.resolved
            else ("provider and model id only")
        )
        lines.append(
            f"{c.model}: the baseline does not record its {' and '.join(c.identity_unknown)} "
            f"(an older report): compared {what}"
        )
    return lines


def notes(comparison: BaselineComparison) -> list[str]:
    """What a reader needs beside the table: changed identities, flipped, added and removed
    tasks, by model."""
    lines = []
    if comparison.problem is not None:
        lines.append(f"--llm-baseline={comparison.ref}: {comparison.problem}")
    elif not comparison.source:
        lines.append(
            f"--llm-baseline={comparison.ref}: no earlier complete run with these models "
            "and this dataset"
        )
    lines += [f"passed over {reason}" for reason in comparison.passed_over]
    if comparison.source:
        lines += [f"{m}: not in the baseline, nothing to compare" for m in comparison.unmatched]
    for c in comparison.models:
        lines += _identity_notes(comparison, c)
        if c.run_tasks is not None and c.tasks < c.run_tasks:
            lines.append(
                f"{c.model}: compared {c.tasks} of this run's {c.run_tasks} tasks "
                f"({c.run_tasks - c.tasks} not in the baseline or not scored in both)"
            )
        for label, tasks in (
            ("worse (pass -> fail)", c.worse),
            ("better (fail -> pass)", c.better),
            ("added (not compared)", c.added),
            ("removed (not compared)", c.removed),
        ):
            if tasks:
                lines.append(f"{c.model} {label}: {', '.join(tasks)}")
    return lines


def changed_identity(comparison: BaselineComparison) -> str | None:
    """Why the gate cannot pass: a model's name now means another model (unless
    `--llm-allow-model-change`); None when every identity is the same or the change allowed.
    What the baseline did not record is never a reason alone."""
    if comparison.model_change_allowed:
        return None
    changed = [c.identity_change for c in comparison.models if c.identity_change]
    if not changed:
        return None
    return "; ".join(changed) + " (--llm-allow-model-change compares them anyway)"


def undecided(comparison: BaselineComparison, allow_missing: bool = False) -> str | None:
    """Why the gate compared nothing for some model, or None when every model was compared.

    A missing baseline (a first run) passes only when the user allows it; a baseline that
    cannot be read, or that shares no scored task, never does."""
    if comparison.problem is not None:
        return comparison.problem
    if not comparison.source or comparison.unmatched:
        if allow_missing:
            return None
        if not comparison.source:
            return (
                f"--llm-baseline={comparison.ref} found no earlier complete run with these "
                "models and this dataset (--llm-allow-missing-baseline passes a first run)"
            )
        return f"no baseline for {', '.join(comparison.unmatched)}"
    empty = [c.model for c in comparison.models if c.tasks == 0]
    if empty:
        return f"no shared scored tasks with the baseline for {', '.join(empty)}"
    return None


def _said(c: BaselineChange) -> str:
    """One model's outcome with the numbers that decided it, and its power when nothing was
    detected: `cand regressed -40 pp [-70, -10] on 5 shared tasks (McNemar p = 0.03)`."""
    interval, p = c.pass_rate_change, c.mcnemar_p
    if interval is None or p is None:
        return f"{c.model}: no shared tasks"
    test = TESTS["tango" if interval.method == "tango" else "paired-t"]
    tasks = f"{c.tasks} shared task{'' if c.tasks == 1 else 's'}"
    decided = f"{test} p = {p:.2g}"
    if p < stats.ALPHA:
        moved = "regressed" if c.regressed else "improved"
        return f"{c.model} {moved} {_signed(interval)} on {tasks} ({decided})"
    return f"no detectable change for {c.model} on {tasks} ({decided}; {_power(c)})"


def verdict(comparison: BaselineComparison) -> str:
    """The comparison in one sentence, regressions first: what each model did, with the
    numbers that decided it and, where nothing was detected, the smallest change the shared
    tasks could have shown; and any model whose identity changed."""
    if not comparison.models:
        return "nothing compared: no model of this run is in the baseline"
    ordered = sorted(comparison.models, key=lambda c: not c.regressed)
    said = [_said(c) for c in ordered]
    said += [f"{m}: not in the baseline" for m in comparison.unmatched]
    said += [c.identity_change for c in comparison.models if c.identity_change]
    return "; ".join(said)
