"""Models side by side (`compare.py`): paired comparisons, their verdicts, guidance documents
and the cross-model diagnostics, by hand and end to end through the offline agents.

One attempt per task: McNemar's score test, z = (a_only - b_only) / sqrt(a_only + b_only), p =
erfc(|z| / sqrt 2), and Tango's interval, which excludes 0 exactly when p < 0.05: 6 flips one
way give z = sqrt 6 = 2.449, p = .0143; 3 give z = 1.732, p = .0833.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import read_report, write_dataset, write_guidance_comparison

from pytest_llmtool.records import EvalReport, EvalSummary, ModelInfo, RunMetadata
from pytest_llmtool.stats.compare import Attempt, bash_pass, by_side, compare, task_of

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
    assert c.mcnemar_p == pytest.approx(0.0143059, abs=1e-6)
    assert (c.pass_difference.estimate, c.pass_difference.method) == (1.0, "tango")
    # never the point [1, 1] a t interval of six equal differences has
    assert c.pass_difference.low == pytest.approx(0.21933, abs=1e-4)
    assert c.pass_difference.high == 1.0
    assert (c.better, c.test) == ("A", "McNemar")
    assert c.verdict == "A better than B: +100 pp, McNemar p = 0.014 with 6 shared tasks"


@pytest.mark.parametrize("flips", range(1, 8))
def test_the_printed_interval_and_the_verdict_never_disagree(flips: int) -> None:
    # The case: "+80 [+24, +100]* ... p 0.12 no detectable difference". Whatever the
    # count, an interval excluding 0 goes with a verdict, and one containing 0 with none.
    units = {f"t{i}": [True] for i in range(flips)}
    b_side = {u: [False] for u in units} | {"same": [True]}
    sides = by_side(_attempts("A", units | {"same": [True]}) + _attempts("B", b_side))
    c = compare("bash", "model", "A", "B", sides)
    assert c is not None
    assert c.pass_difference.excludes_zero() == (c.better is not None) == (c.mcnemar_p < 0.05)


def test_three_flips_are_not_enough_and_the_verdict_says_why() -> None:
    units = {f"t{i}": [True] for i in range(3)}
    same = {f"s{i}": [True] for i in range(2)}
    sides = by_side(
        _attempts("A", units | same) + _attempts("B", {u: [False] for u in units} | same)
    )
    c = compare("bash", "model", "A", "B", sides)
    assert c is not None
    assert not c.pass_difference.excludes_zero()
    assert c.mcnemar_p == pytest.approx(0.0832645, abs=1e-6)
    # psi = .6, d = .6: (1.96·sqrt .6 + .841621·sqrt(.6 - .36))^2 / .36 = 10.35
    assert (c.better, c.tasks_to_detect) == (None, 11)
    assert c.verdict == (
        "no detectable difference: McNemar p = 0.083 with 5 shared tasks; "
        "about 11 would detect +60 pp"
    )


def test_b_better_and_only_shared_tasks_are_paired() -> None:
    b_wins = {f"t{i}": [True] for i in range(7)}
    sides = by_side(
        _attempts("A", {**{u: [False] for u in b_wins}, "a_alone": [True]})
        + _attempts("B", {**b_wins, "b_alone": [False]})
    )
    c = compare("bash", "model", "A", "B", sides)
    assert c is not None
    # 7 shared tasks, all B only: z = -sqrt 7, p = .00815
    assert (c.tasks, len(c.b_only), c.mcnemar_p) == (7, 7, pytest.approx(0.0081510, abs=1e-6))
    assert c.verdict == "B better than A: -100 pp, McNemar p = 0.0082 with 7 shared tasks"
    assert compare("bash", "model", "A", "C", sides) is None


def test_trials_pair_mean_pass_rates_and_flip_by_majority() -> None:
    # x: A 2/2, B 1/2 (a tie fails): a flip; y: A 1/2, B 0/2: both fail, no flip.
    # Per-task differences 1 - .5 = .5 and .5 - 0 = .5: mean .5, no spread, so no t test;
    # the majority outcomes (one flip, x) decide: Tango and McNemar over 2 tasks.
    sides = by_side(
        _attempts("A", {"x": [True, True], "y": [True, False]})
        + _attempts("B", {"x": [True, False], "y": [False, False]})
    )
    c = compare("bash", "model", "A", "B", sides)
    assert c is not None
    assert (c.a_pass_rate, c.b_pass_rate) == (0.75, 0.25)
    assert (c.pass_difference.estimate, c.pass_difference.method) == (0.5, "tango")
    assert c.pass_difference.low < 0 < c.pass_difference.high
    assert (c.a_only, c.b_only, c.mcnemar_p) == (["x"], [], pytest.approx(0.3173105))
    assert c.verdict.startswith("no detectable difference: McNemar p = 0.32 with 2 shared")


def test_trials_with_spread_use_the_paired_t_test() -> None:
    # x: A 2/2, B 0/2 (diff 1); y: A 1/2, B 1/2 (0); z: A 2/2, B 1/2 (.5): mean .5, sd .5,
    # t = .5 / (.5/sqrt 3) = 1.732 on 2 df: p = .2254; half = 4.302653 · .288675 = 1.24207.
    sides = by_side(
        _attempts("A", {"x": [True, True], "y": [True, False], "z": [True, True]})
        + _attempts("B", {"x": [False, False], "y": [False, True], "z": [True, False]})
    )
    c = compare("bash", "model", "A", "B", sides)
    assert c is not None
    assert (c.pass_difference.method, c.test) == ("paired-t", "paired t")
    assert c.mcnemar_p == pytest.approx(0.2254, abs=1e-4)
    assert c.pass_difference.low == pytest.approx(0.5 - 1.24207, abs=1e-4)
    assert c.pass_difference.high == 1.0  # 1.742 cut to what a difference of rates can be
    assert c.verdict.startswith("no detectable difference: paired t p = 0.23 with 3 shared")


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
    result = pytester.runpytest("--llm-summary=full", "--llm-model=oracle,nop", "--llm-report=out")
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
    # 6 flips one way: p = .0143; pass rates 6/7 and 0/7; Tango's interval
    assert c["mcnemar_p"] == pytest.approx(0.0143059, abs=1e-6)
    assert (c["a_pass_rate"], c["b_pass_rate"]) == (pytest.approx(6 / 7), 0.0)
    assert c["pass_difference"]["low"] == pytest.approx(0.19910, abs=1e-4)
    assert c["verdict"] == "oracle better than nop: +86 pp, McNemar p = 0.014 with 7 shared tasks"
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
            # The headline says the verdict with its numbers; the table, the figures.
            "[[]bash[]] oracle vs nop: " + c["verdict"],
            "Comparisons (paired over the tasks both ran; a - b; verdicts above):",
            "Kind*Compared*Tasks*Pass a/b*Pass diff (pp)*Score diff (pp)*Flips a/b*p",
            "bash*oracle vs nop*7*86%/0%*+86 pp [[]+20, +97[]][*]*6/0*0.014",
            "[*] n < 30: wide interval",
            # The terminal names five tasks; report.md and report.json list them all. A line
            # wider than the terminal (120 columns here) wraps, indented.
            "  [[]bash[]] oracle passes, nop fails: " + ", ".join(wins[:4]) + ",",
            "      " + shown.removeprefix(", ".join(wins[:4]) + ", "),
            "Cross-model diagnostics:",
            "  [[]bash[]] fail for every model (a gap in the tool, or a broken task?): "
            "data.jsonl::broken",
            "  [[]bash[]] categories whose overall rate is below 50% for every model *",
            "      syntax there): gap (oracle 0%, nop 0%)",
        ]
    )
    # With two models the tasks nop alone fails are the flips above: said once.
    result.stdout.no_fnmatch_line("*fail for nop only*")
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert "## Comparisons" in markdown and "## Cross-Model Diagnostics" in markdown
    assert "- `data.jsonl::broken`" in markdown


def test_one_model_has_no_comparison_and_no_diagnostics(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    result = pytester.runpytest("--llm-summary=full", "--llm-report=out")
    report = read_report(pytester)
    assert (report["comparisons"], report["diagnostics"]) == ([], {})
    result.stdout.no_fnmatch_line("Comparisons*")
    result.stdout.no_fnmatch_line("Cross-model diagnostics:")


def test_a_named_model_with_no_result_is_said_not_compared(
    pytester: pytest.Pytester, dataset: Path
) -> None:
    # Two models named, one's items all deselected: no comparison, and the report says why.
    result = pytester.runpytest("--llm-model=oracle,nop", "-k", "oracle", "--llm-report=out")
    assert read_report(pytester)["comparisons"] == []
    said = "Not compared: nop (no scored result: its items were deselected, skipped or errored)"
    result.stdout.fnmatch_lines([said])
    markdown = (pytester.path / "out" / "report.md").read_text()
    assert f"## Comparisons\n\n{said}" in markdown
    # Both with results: nothing to say.
    pytester.runpytest("--llm-model=oracle,nop").stdout.no_fnmatch_line("Not compared*")


class Unread(list[Any]):
    """Results that fail the test if anything reads them."""

    def __iter__(self) -> Any:
        raise AssertionError("the results were read")


def test_a_run_of_one_model_pays_no_pass_for_comparisons() -> None:
    # Each pass over a large run's results decodes every one; with one model nothing compares.
    metadata = RunMetadata.model_construct(models=[ModelInfo.model_construct(name="a")])
    report = EvalReport.model_construct(
        metadata=metadata, by_model={"a": EvalSummary()}, tool_modes={}, results=Unread()
    )
    assert bash_pass(report) == ([], [])
    report.by_model["b"] = EvalSummary()  # a second model: the pass is needed
    with pytest.raises(AssertionError, match="were read"):
        bash_pass(report)


def test_guidance_documents_are_compared_per_model(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_guidance_comparison(project)
    result = pytester.runpytest("--llm-summary=full", "--llm-report=out")
    result.assert_outcomes(passed=1, failed=1)
    (c,) = _comparisons(read_report(pytester))
    assert (c["kind"], c["subject"], c["model"], c["a"], c["b"]) == (
        "scenario",
        "guidance",
        "oracle",
        "v1.md",
        "v2.md",
    )
    # one scenario: v2 passes, v1 fails; z = -1, p = .3173; gates 3/4 against 4/4. The
    # issue's "-100 [-100, -100]* ... no detectable difference": an interval, not a point,
    # and the verdict says why (psi = 1, d = -1: 1.96² = 3.84, so about 4 tasks).
    assert (c["tasks"], c["a_only"], c["b_only"]) == (1, [], ["scenario.yaml::add_notes"])
    assert c["mcnemar_p"] == pytest.approx(0.3173105)
    assert c["verdict"] == (
        "no detectable difference: McNemar p = 0.32 with 1 shared task; "
        "about 4 would detect -100 pp"
    )
    assert c["pass_difference"]["low"] == -1.0 and c["pass_difference"]["high"] > 0
    assert c["score_difference"]["estimate"] == pytest.approx(3 / 4 - 1)
    result.stdout.fnmatch_lines(
        [
            "[[]scenario[]] v1.md vs v2.md [[]oracle[]]: no detectable difference: "
            "McNemar p = 0.32 *",
            "scenario guidance*v1.md vs v2.md [[]oracle[]]*1*0%/100%*-100 pp [[]-100, +*",
            "  [[]scenario, oracle[]] v2.md passes, v1.md fails: scenario.yaml::add_notes",
        ]
    )
