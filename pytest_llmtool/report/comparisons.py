"""Comparisons and cross-model diagnostics in the reports: the rows and findings the terminal
and `report.md` share (`stats/compare.py` computes them)."""

from __future__ import annotations

from pytest_llmtool import stats
from pytest_llmtool.records import Comparison, EvalReport, agent_model
from pytest_llmtool.stats import sequential
from pytest_llmtool.stats.intervals import any_small, show_difference


def _compared(c: Comparison) -> str:
    return f"{c.a} vs {c.b}" + (f" [{c.model}]" if c.model else "")


def verdict_lines(report: EvalReport) -> list[str]:
    """Each comparison's verdict with the numbers that decided it (p, shared tasks), one line
    per pair: what the headline says of the comparisons."""
    return [f"[{c.kind}] {_compared(c)}: {c.verdict}" for c in report.comparisons]


def sequential_lines(report: EvalReport) -> list[str]:
    """`--llm-early-stop=compare`'s decided comparisons, each said as what it decided: when
    the trials could stop, over these tasks' trials. The verdict over tasks stays
    `verdict_lines`', so a run whose trials decided early may still read "no detectable
    difference" there, and the two lines say why without contradicting."""
    found = report.early_stop.comparisons if report.early_stop is not None else []
    return [
        f"early stop: {sequential.said(d)}; not a verdict over tasks" for d in found if d.decided
    ]


def comparison_rows(report: EvalReport) -> tuple[list[str], list[list[str]]]:
    """One row per pair: pass rates over the shared tasks, the paired differences (a - b, in
    percentage points), the flipped tasks (a only / b only), the p of the test that decided
    (McNemar's, or the paired t test with several attempts) and the verdict with its numbers."""
    headers = [
        "Kind",
        "Compared",
        "Tasks",
        "Pass a/b",
        "Pass diff (pp)",
        "Score diff (pp)",
        "Flips a/b",
        "p",
        "Verdict",
    ]
    rows = [
        [
            {
                "model": c.kind,
                "guidance": f"{c.kind} guidance",
                "variant": f"{c.kind} variant",
            }.get(c.subject, f"{c.kind} tool mode"),
            _compared(c),
            str(c.tasks),
            f"{c.a_pass_rate:.0%}/{c.b_pass_rate:.0%}",
            show_difference(c.pass_difference),
            show_difference(c.score_difference),
            f"{len(c.a_only)}/{len(c.b_only)}",
            f"{c.mcnemar_p:.2g}",
            c.verdict,
        ]
        for c in report.comparisons
    ]
    return headers, rows


def multiplicity_note(report: EvalReport) -> str | None:
    """With several pairs, how many of their differences survive Holm's correction, naming
    those that do not (the verdicts above name them all): each verdict tests its own pair at
    5%, so among many pairs one may differ by chance."""
    found = report.comparisons
    if len(found) < 2:
        return None
    adjusted = stats.holm([c.mcnemar_p for c in found])
    differ = [c for c in found if c.better is not None]
    kept = [
        f"[{c.kind}] {_compared(c)}"
        for c, p in zip(found, adjusted, strict=True)
        if p < stats.ALPHA
    ]
    if not differ:
        return f"None of these {len(found)} pairs differs: correcting for them changes nothing."
    said = f"Holm's correction over these {len(found)} pairs (5% for the family) keeps"
    lost = [name for name in (f"[{c.kind}] {_compared(c)}" for c in differ) if name not in kept]
    if not lost:
        every = {1: "the one difference", 2: "both differences"}.get(
            len(kept), f"all {len(kept)} differences"
        )
        return f"{said} {every}."
    return f"{said} {len(kept)} of the {len(differ)} differences; not {', '.join(lost)}."


def uncompared_note(report: EvalReport) -> str | None:
    """The models the run named that have no scored result: said, rather than left out of the
    comparisons without a word (their items were deselected, skipped or errored)."""
    named = [m.name for m in report.metadata.models]
    if len(named) < 2:
        return None
    scored = {m for m, s in report.by_model.items() if s.total_tasks}
    scored |= {m for m, s in report.scenario_summary.items() if s.scenarios}
    if report.optimization is not None:
        scored |= {agent_model(agent) for agent in report.optimization.by_agent}
    scored |= {key.removesuffix(f"-{s.variant}") for key, s in report.harbor.items() if s.items}
    missing = [m for m in named if m not in scored]
    if not missing:
        return None
    return (
        f"Not compared: {', '.join(missing)} (no scored result: "
        "its items were deselected, skipped or errored)"
    )


def comparisons_small(report: EvalReport) -> bool:
    return any_small(i for c in report.comparisons for i in (c.pass_difference, c.score_difference))


def flips(report: EvalReport) -> list[tuple[str, list[str]]]:
    """The tasks that flipped, per pair and direction: what a reader looks at first."""
    found = []
    for c in report.comparisons:
        scope = f"{c.kind}" + (f", {c.model}" if c.model else "")
        for passes, fails, tasks in ((c.a, c.b, c.a_only), (c.b, c.a, c.b_only)):
            if tasks:
                found.append((f"[{scope}] {passes} passes, {fails} fails", tasks))
    return found


def diagnostic_findings(report: EvalReport) -> list[tuple[str, list[str]]]:
    """Seed 000's cross-model diagnostics that found something, each with what it names.
    With two models, the tasks one of them alone fails are the comparison's flips, said
    there already (`flips`), so they are not said again."""
    found = []
    for kind, d in report.diagnostics.items():
        if d.failed_by_all:
            found.append(
                (
                    f"[{kind}] fail for every model (a gap in the tool, or a broken task?)",
                    d.failed_by_all,
                )
            )
        for model, tasks in d.failed_by_one.items() if len(d.models) > 2 else ():
            found.append((f"[{kind}] fail for {model} only (model capability)", tasks))
        if d.weak_categories:
            found.append(
                (
                    f"[{kind}] categories whose overall rate is below 50% for every model "
                    "(seed 000 reads this as the tool missing builtins or syntax there)",
                    [
                        f"{name} ({', '.join(f'{m} {r:.0%}' for m, r in rates.items())})"
                        for name, rates in d.weak_categories.items()
                    ],
                )
            )
    return found
