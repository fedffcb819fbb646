"""Models side by side (`compare.py`): paired comparisons, their verdicts, guidance documents
and the cross-model diagnostics, by hand and end to end through the offline agents.

McNemar's exact p = min(1, 2·P[X <= min(a_only, b_only)]), X ~ Binomial(a_only + b_only, 1/2):
6 flips one way and none back give 2 · (1/2)^6 = 1/32 = .03125; 5 give 2/32 = .0625.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import read_report, write_dataset, write_guidance_comparison

from pytest_llmtool.compare import Attempt, by_side, compare, task_of

# ------------------------------------------------------------------------------ by hand


def _attempts(side: str, outcomes: dict[str, list[bool]]) -> list[Attempt]:
    return [
        Attempt(unit, side, passed, float(passed))
        for unit, attempts in outcomes.items()
        for passed in attempts
    ]


def test_six_flips_one_way_make_a_verdict() -> None:
    units = {f"t{i}": [True] for i in range(6)}
    sides = by_side(_attempts("A", units) + _attempts("B", {u: [False] for u in units}))
    c = compare("bash", "model", "A", "B", sides)
    assert c is not None
    assert (c.tasks, c.a_pass_rate, c.b_pass_rate) == (6, 1.0, 0.0)
    assert c.a_only == [f"t{i}" for i in range(6)] and c.b_only == []
    assert c.mcnemar_p == pytest.approx(1 / 32)
    assert (c.pass_difference.estimate, c.pass_difference.method) == (1.0, "t")
    assert (c.better, c.verdict) == ("A", "A better than B")


def test_five_flips_are_not_enough_even_with_an_interval_of_no_width() -> None:
    # Every difference is 1: the t interval is [1, 1], but McNemar's p is 2/32 = .0625.
    units = {f"t{i}": [True] for i in range(5)}
    sides = by_side(_attempts("A", units) + _attempts("B", {u: [False] for u in units}))
    c = compare("bash", "model", "A", "B", sides)
    assert c is not None
    assert c.pass_difference.excludes_zero()
    assert c.mcnemar_p == pytest.approx(0.0625)
    assert (c.better, c.verdict) == (None, "no detectable difference")


def test_b_better_and_only_shared_tasks_are_paired() -> None:
    b_wins = {f"t{i}": [True] for i in range(7)}
    sides = by_side(
        _attempts("A", {**{u: [False] for u in b_wins}, "a_alone": [True]})
        + _attempts("B", {**b_wins, "b_alone": [False]})
    )
    c = compare("bash", "model", "A", "B", sides)
    assert c is not None
    # 7 shared tasks, all B only: p = 2 · (1/2)^7 = 1/64
    assert (c.tasks, len(c.b_only), c.mcnemar_p) == (7, 7, pytest.approx(1 / 64))
    assert c.verdict == "B better than A"
    assert compare("bash", "model", "A", "C", sides) is None


def test_trials_pair_mean_pass_rates_and_flip_by_majority() -> None:
    # x: A 2/2, B 1/2 (a tie fails): a flip; y: A 1/2, B 0/2: both fail, no flip.
    # Per-task differences 1 - .5 = .5 and .5 - 0 = .5: mean .5 (no spread: [.5, .5]).
    sides = by_side(
        _attempts("A", {"x": [True, True], "y": [True, False]})
        + _attempts("B", {"x": [True, False], "y": [False, False]})
    )
    c = compare("bash", "model", "A", "B", sides)
    assert c is not None
    assert (c.a_pass_rate, c.b_pass_rate) == (0.75, 0.25)
    assert (c.pass_difference.estimate, c.pass_difference.method) == (0.5, "clustered-t")
    assert (c.a_only, c.b_only, c.mcnemar_p) == (["x"], [], 1.0)
    assert c.verdict == "no detectable difference"


def test_the_score_difference_is_paired_too() -> None:
    # scores a: .9, .5, .4; b: .5, .5, .2: differences .4, 0, .2: mean .2, sd .2,
    # half = t95(2) · .2/sqrt(3) = 4.302653 · .11547 = .49683.
    sides = by_side(
        [
            Attempt("p", "a", False, 0.9),
            Attempt("q", "a", False, 0.5),
            Attempt("r", "a", False, 0.4),
            Attempt("p", "b", False, 0.5),
            Attempt("q", "b", False, 0.5),
            Attempt("r", "b", False, 0.2),
        ]
    )
    c = compare("bash", "model", "a", "b", sides)
    assert c is not None
    d = c.score_difference
    assert (d.estimate, d.low, d.high) == pytest.approx(
        (0.2, 0.2 - 0.49683, 0.2 + 0.49683), abs=1e-5
    )


@pytest.mark.parametrize(
    ("nodeid", "task"),
    [
        ("d.jsonl::alpha[haiku-t2]", "d.jsonl::alpha"),
        ("sub/x.yaml::add[haiku-v1]", "sub/x.yaml::add"),
        ("plain", "plain"),
    ],
)
def test_task_of_drops_the_bracket(nodeid: str, task: str) -> None:
    assert task_of(nodeid) == task


# --------------------------------------------------------------------------- end to end

WINS = [
    {
        "id": f"win{i}",
        "category": "shell",
        "description": "echo",
        "prompt": f"Print word{i}.",
        "expectations": [{"check": f"stdout_contains:word{i}"}],
        "solution": f"echo word{i}",
    }
    for i in range(6)
]
BROKEN = {
    "id": "broken",
    "category": "gap",
    "description": "no model can pass it",
    "prompt": "Make /nowhere.",
    "expectations": [{"check": "file_exists:/nowhere"}],
    "solution": "true",
}


def _comparisons(report: dict[str, Any]) -> list[dict[str, Any]]:
    return list(report["comparisons"])


def test_two_models_compared_with_the_flipped_tasks_and_diagnosed(
    pytester: pytest.Pytester,
) -> None:
    write_dataset(pytester, [*WINS, BROKEN])
    result = pytester.runpytest("--llm-model=oracle,nop", "--llm-report=out")
    result.assert_outcomes(passed=6, failed=8)
    report = read_report(pytester)
    (c,) = _comparisons(report)
    wins = [f"data.jsonl::win{i}" for i in range(6)]
    assert (c["kind"], c["subject"], c["a"], c["b"], c["tasks"]) == (
        "bash",
        "model",
        "oracle",
        "nop",
        7,
    )
    assert (c["a_only"], c["b_only"]) == (wins, [])
    # 6 flips one way: p = 1/32; pass rates 6/7 and 0/7
    assert c["mcnemar_p"] == pytest.approx(1 / 32)
    assert (c["a_pass_rate"], c["b_pass_rate"]) == (pytest.approx(6 / 7), 0.0)
    # differences 1 (six times) and 0: mean 6/7, sd = sqrt(6/7 · 1/7 · 7/6) = .37796,
    # half = t95(6) · .37796 / sqrt(7) = 2.446912 · .14286 = .34956.
    assert c["pass_difference"]["low"] == pytest.approx(6 / 7 - 0.34956, abs=1e-4)
    assert c["verdict"] == "oracle better than nop"
    diagnosed = report["diagnostics"]["bash"]
    assert diagnosed["models"] == ["oracle", "nop"]
    assert diagnosed["failed_by_all"] == ["data.jsonl::broken"]
    assert diagnosed["failed_by_one"] == {"nop": wins}
    # "gap" is 0% for both; "shell" is 100% for the oracle
    assert diagnosed["weak_categories"] == {"gap": {"oracle": 0.0, "nop": 0.0}}
    assert len(wins) == 6
    shown = ", ".join(wins[:5]) + ", and 1 more (all in report.md)"
    result.stdout.fnmatch_lines(
        [
            "Comparisons (paired over the tasks both ran; a - b):",
            "Kind*Compared*Tasks*Pass a/b*Pass diff (pp)*Score diff (pp)*Flips a/b*p*Verdict",
            "bash*oracle vs nop*7*86%/0%*+86 [[]+51, +100[]][*]*6/0*0.031*oracle better than nop",
            "[*] n < 30: wide interval",
            # The terminal names five tasks; report.md and report.json list them all.
            "  [[]bash[]] oracle passes, nop fails: " + shown,
            "Cross-model diagnostics:",
            "  [[]bash[]] fail for every model (a gap in the tool, or a broken task?): "
            "data.jsonl::broken",
            "  [[]bash[]] fail for nop only (model capability): " + shown,
            "  [[]bash[]] categories below 50% for every model *: gap (oracle 0%, nop 0%)",
        ]
    )
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert "## Comparisons" in markdown and "## Cross-Model Diagnostics" in markdown
    assert "- `data.jsonl::broken`" in markdown


def test_one_model_has_no_comparison_and_no_diagnostics(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    result = pytester.runpytest("--llm-report=out")
    report = read_report(pytester)
    assert (report["comparisons"], report["diagnostics"]) == ([], {})
    result.stdout.no_fnmatch_line("Comparisons*")
    result.stdout.no_fnmatch_line("Cross-model diagnostics:")


def test_guidance_documents_are_compared_per_model(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_guidance_comparison(project)
    result = pytester.runpytest("--llm-report=out")
    result.assert_outcomes(passed=1, failed=1)
    (c,) = _comparisons(read_report(pytester))
    assert (c["kind"], c["subject"], c["model"], c["a"], c["b"]) == (
        "scenario",
        "guidance",
        "oracle",
        "v1.md",
        "v2.md",
    )
    # one scenario: v2 passes, v1 fails; p = 2 · P[X <= 0 | 1] = 1; gates 3/4 against 4/4
    assert (c["tasks"], c["a_only"], c["b_only"]) == (1, [], ["scenario.yaml::add_notes"])
    assert (c["mcnemar_p"], c["verdict"]) == (1.0, "no detectable difference")
    assert c["score_difference"]["estimate"] == pytest.approx(3 / 4 - 1)
    result.stdout.fnmatch_lines(
        [
            "scenario guidance*v1.md vs v2.md [[]oracle[]]*1*0%/100%*no detectable difference",
            "  [[]scenario, oracle[]] v2.md passes, v1.md fails: scenario.yaml::add_notes",
        ]
    )
