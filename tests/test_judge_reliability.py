"""The judge's own reliability: agreement statistics (hand-computed), the interval rule of
repeated judging, panels by strict majority, and calibration against people's labels, through
the real SDK clients and the fake server."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from fake_llm_server import FakeLLMServer, Turn
from helpers import PROMPT, read_report, scenario, write_scenario

from pytest_llmtool import cli
from pytest_llmtool.agents.judge import (
    Entry,
    Rubric,
    decide,
    judge_prompt,
    majority,
    sample_work_id,
)
from pytest_llmtool.history.calibrate import MIN_LABELS, load_labels, parse_gate
from pytest_llmtool.stats.agreement import cohen_kappa, krippendorff_alpha, leniency, raw_agreement

# --------------------------------------------------------------------------- pure statistics


def test_krippendorff_alpha_interval_by_hand() -> None:
    # Units (judge, human): (1, 1), (0.5, 0), (0, 0); n = 6 pairable values.
    # D_o: only unit 2 disagrees: sum over ordered pairs (0.5)^2 * 2 = 0.5, / (m_u - 1 = 1)
    #      = 0.5; D_o = 0.5 / 6 = 1/12.
    # D_e: values 1, 1, 0.5, 0, 0, 0, mean 5/12; sum (v - mean)^2 = 2.25 - 6 (5/12)^2
    #      = 29/24; over ordered pairs 2 * 6 * 29/24 = 14.5; D_e = 14.5 / (6 * 5) = 29/60.
    # alpha = 1 - (1/12) / (29/60) = 1 - 5/29 = 24/29.
    assert krippendorff_alpha([[1, 1], [0.5, 0], [0, 0]]) == pytest.approx(24 / 29)


def test_krippendorff_alpha_nominal_missing_and_undefined() -> None:
    # Nominal, units (a, a), (a, b), (b, b, None): the None is dropped, n = 6.
    # D_o = (0 + 2/1 + 0) / 6 = 1/3; D_e = (36 - 3^2 - 3^2) / 30 = 18/30 = 3/5.
    # alpha = 1 - (1/3) / (3/5) = 4/9.
    units = [["a", "a"], ["a", "b"], ["b", "b", None]]
    assert krippendorff_alpha(units, "nominal") == pytest.approx(4 / 9)
    # A unit with a single value is not pairable and counts for nothing.
    assert krippendorff_alpha([*units, ["a", None]], "nominal") == pytest.approx(4 / 9)
    assert krippendorff_alpha([[0.5, 0.5], [0.5, 0.5]]) is None  # no variation: D_e = 0
    assert krippendorff_alpha([[0.5, None]]) is None


def test_cohen_kappa_and_raw_agreement_by_hand() -> None:
    judge = ["pass", "pass", "fail", "fail", "pass"]
    human = ["pass", "fail", "fail", "fail", "pass"]
    # p_o = 4/5; judge says pass 3/5, human 2/5: p_e = 3/5 * 2/5 + 2/5 * 3/5 = 12/25.
    # kappa = (4/5 - 12/25) / (1 - 12/25) = (8/25) / (13/25) = 8/13.
    assert raw_agreement(judge, human) == pytest.approx(0.8)
    assert cohen_kappa(judge, human) == pytest.approx(8 / 13)
    assert cohen_kappa(["pass"] * 3, ["pass"] * 3) is None  # p_e = 1
    assert cohen_kappa([], []) is None
    with pytest.raises(ValueError, match="rated 2 and 1"):
        cohen_kappa(["a", "b"], ["a"])


def test_leniency_is_the_mean_difference_with_a_t_interval() -> None:
    # Differences 0.1, 0.3: mean 0.2, sd sqrt(0.02), SE 0.1, t(1) = 12.706: 0.2 +- 1.2706,
    # cut to [-1, 1].
    found = leniency([0.6, 0.8], [0.5, 0.5])
    assert found is not None
    assert found.estimate == pytest.approx(0.2)
    assert (found.low, found.high) == (-1.0, 1.0)
    # Differences 0.2, 0.2, 0.1, 0.3: mean 0.2, sd sqrt(0.02/3), SE 0.040825, t(3) = 3.1824.
    found = leniency([0.7, 0.6, 0.5, 0.9], [0.5, 0.4, 0.4, 0.6])
    assert found is not None
    half = 3.182446 * math.sqrt(0.02 / 3) / 2
    assert (found.low, found.high) == pytest.approx((0.2 - half, 0.2 + half), abs=1e-5)
    assert leniency([], []) is None


@pytest.mark.parametrize(
    ("scores", "decision", "bounds"),
    [
        # mean 0.85, sd 0.05, SE 0.05/sqrt(5), t(4) = 2.7764: half 0.0621
        ([0.8, 0.9, 0.8, 0.9, 0.85], "pass", (0.7879, 0.9121)),
        # mean 0.7 (a single call would pass), sd sqrt(0.035), half 0.2323: straddles 0.7
        ([0.5, 0.9, 0.6, 0.9, 0.6], "inconclusive", (0.4677, 0.9323)),
        # mean 0.35, sd 0.05: [0.2879, 0.4121], wholly below 0.7
        ([0.3, 0.4, 0.3, 0.4, 0.35], "fail", (0.2879, 0.4121)),
        # no spread: a zero-width interval at the score
        ([0.7, 0.7], "pass", (0.7, 0.7)),
    ],
)
def test_the_rule_of_repeated_scores(
    scores: list[float], decision: str, bounds: tuple[float, float]
) -> None:
    interval, found = decide(scores, 0.7)
    assert found == decision
    assert interval is not None
    assert (interval.low, interval.high) == pytest.approx(bounds, abs=1e-4)


def test_one_sample_is_decided_on_its_score() -> None:
    assert decide([0.7], 0.7) == (None, "pass")
    assert decide([0.69], 0.7) == (None, "fail")


def test_a_panel_needs_a_strict_majority() -> None:
    assert majority(["pass", "pass", "fail"]) == "pass"
    assert majority(["fail", "pass", "fail"]) == "fail"
    assert majority(["pass", "fail"]) == "inconclusive"
    assert majority(["pass", "fail", "inconclusive"]) == "inconclusive"
    assert majority(["pass", "pass", "inconclusive", "fail"]) == "inconclusive"  # 2 of 4


def test_samples_are_filed_apart() -> None:
    assert sample_work_id("s.judge", 0) == "s.judge"  # as a single judge call always was
    assert sample_work_id("s.judge", 2) == "s.judge.s2"


def test_the_gate_option() -> None:
    assert parse_gate("0.8") == {"agreement": 0.8}
    assert parse_gate("kappa=0.6, alpha=0.5") == {"kappa": 0.6, "alpha": 0.5}
    for bad, message in [
        ("kapa=0.6", "unknown metric 'kapa'"),
        ("kappa=high", "expected a number from -1 to 1, got 'high'"),
        ("agreement=1.5", "got '1.5'"),
        (",", "name at least one"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_gate(bad)


# ------------------------------------------------------------------ repeated judging, panels


def _answer(score: float) -> list[Turn]:
    """One judge conversation scoring both criteria `score` (so the weighted score is it)."""
    body = {
        "scores": {"correctness": score, "efficiency": score},
        "weighted_score": score,
        "confidence": 0.8,
        "issues": [],
        "highlights": [],
    }
    return [Turn(text=json.dumps(body))]


def _judged_scenario(project: Path) -> None:
    data = scenario()
    data["evaluation"]["judge"] = {"enabled": True, "rubric": "rubric.yaml", "pass_threshold": 0.7}
    write_scenario(project, data)


@pytest.mark.parametrize(
    ("scores", "decision", "bounds"),
    [
        ([0.8, 0.9, 0.8, 0.9, 0.85], "pass", (0.7879, 0.9121)),
        ([0.5, 0.9, 0.6, 0.9, 0.6], "inconclusive", (0.4677, 0.9323)),
        ([0.3, 0.4, 0.3, 0.4, 0.35], "fail", (0.2879, 0.4121)),
    ],
)
def test_a_scenario_judged_five_times_is_decided_by_its_interval(
    pytester: pytest.Pytester,
    project: Path,
    server: FakeLLMServer,
    scores: list[float],
    decision: str,
    bounds: tuple[float, float],
) -> None:
    _judged_scenario(project)
    server.script_attempts_containing(PROMPT, [_answer(s) for s in scores])
    result = pytester.runpytest(
        "--llm-summary=full",
        "--llm-judge-model=haiku",
        "--llm-judge-samples=5",
        "--llm-report=out",
        "-rA",
    )
    result.assert_outcomes(**{"passed" if decision == "pass" else "failed": 1})
    report = read_report(pytester)
    (run,) = report["scenarios"]
    ev = run["evaluation"]
    assert ev["judge_decision"] == decision
    assert ev["outcome"] == ("pass" if decision == "pass" else "fail")
    assert ev["judge_score"] == pytest.approx(sum(scores) / 5)
    assert (ev["judge_interval"]["low"], ev["judge_interval"]["high"]) == pytest.approx(
        bounds, abs=1e-4
    )
    assert ev["judge_interval"]["method"] == "t"
    (opinion,) = ev["judge_panel"]
    assert opinion["samples"] == pytest.approx(scores)
    assert opinion["model"] == "haiku"
    judge_requests = [r for r in server.requests if r.body.get("model") == "claude-haiku-4-5"]
    assert len(judge_requests) == 5
    summary = report["scenario_summary"]["oracle"]
    assert summary["inconclusive"] == (decision == "inconclusive")
    assert summary["passed"] == (decision == "pass")
    # Each set of samples has the one standard deviation given above.
    sd = {"pass": 0.05, "inconclusive": math.sqrt(0.035), "fail": 0.05}[decision]
    assert summary["judge_sample_sd"] == pytest.approx(sd)
    # The judge's five calls are in the books.
    assert summary["judge"]["calls"] == 5
    shown = f"{sum(scores) / 5:.2f} [[]{bounds[0]:.2f}\u2013{bounds[1]:.2f}]"  # [[] is a "["
    result.stdout.fnmatch_lines([f"*add_notes*{decision.upper()}*3/3*{shown}*"])
    if decision == "inconclusive":
        result.stdout.fnmatch_lines(
            [
                "INCONCLUSIVE: judge could not decide (not a pass); judge 0.70 *: inconclusive",
                "judge [[]oracle]: 1 INCONCLUSIVE (counted as not passed)*",
            ]
        )


def test_repeated_samples_are_recorded_apart_and_replayed(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer
) -> None:
    _judged_scenario(project)
    server.script_attempts_containing(PROMPT, [_answer(s) for s in (0.8, 0.9, 0.85)])
    args = ["--llm-judge-model=haiku", "--llm-judge-samples=3", "--llm-report=out"]
    pytester.runpytest(*args, "--llm-record=rec").assert_outcomes(passed=1)
    recorded = sorted(p.parent.name for p in (pytester.path / "rec").rglob("*.json"))
    assert recorded == ["add_notes.judge", "add_notes.judge.s1", "add_notes.judge.s2"]
    server.reset()  # nothing answers now but the recordings
    pytester.runpytest(*args, "--llm-replay=rec").assert_outcomes(passed=1)
    (run,) = read_report(pytester)["scenarios"]
    assert run["evaluation"]["judge_panel"][0]["samples"] == pytest.approx([0.8, 0.9, 0.85])


def test_repeated_judging_is_paid_for_and_stops_at_the_cost_limit(
    pytester: pytest.Pytester, project: Path, server: FakeLLMServer
) -> None:
    _judged_scenario(project)
    # Each answer reads 400,000 input tokens: $0.40 at haiku's $1 per million.
    costly = [Turn(text=_answer(0.9)[0].text, input_tokens=400_000)]
    server.script_attempts_containing(PROMPT, [costly] * 5)
    result = pytester.runpytest(
        "--llm-judge-model=haiku",
        "--llm-judge-samples=5",
        "--llm-max-cost=1.0",
        "--llm-report=out",
        "-rs",
    )
    # $0.40, $0.80, $1.20: the fourth sample is refused before it starts. (The fake server
    # counts far more input tokens than the request has bytes, so each call costs more than
    # the worst case reserved for it.) The item is stopped by the cost limit: skipped.
    judge_requests = [r for r in server.requests if r.body.get("model") == "claude-haiku-4-5"]
    assert len(judge_requests) == 3
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*stopped by the cost limit: $1.2000 spent of $1.0000*"])
    report = read_report(pytester)
    assert report["budget"]["spent_usd"] == pytest.approx(1.2)
    # What it paid for is kept: the agent's run and the three samples' calls.
    (stopped,) = report["stopped"]
    assert stopped["trace"] is not None and len(stopped["judge_calls"]) == 3


@pytest.mark.parametrize(
    ("samples", "scores", "decision", "votes"),
    [
        # Split 2 to 1: haiku 0.8 and gpt-5-mini 0.9 pass, sonnet 0.3 fails: a strict majority
        # passes.
        (1, [0.8, 0.9, 0.3], "pass", "2/3 pass"),
        # Two samples each: haiku [0.8, 0.8] passes (no spread), gpt-5-mini [0.3, 0.3] fails,
        # sonnet [0.5, 0.9] straddles 0.7 (t(1) = 12.7): 1 pass, 1 fail, 1 inconclusive, so no
        # strict majority.
        (2, [0.8, 0.8, 0.3, 0.3, 0.5, 0.9], "inconclusive", "no strict majority"),
    ],
)
def test_a_judge_panel_decides_by_strict_majority(
    pytester: pytest.Pytester,
    project: Path,
    server: FakeLLMServer,
    samples: int,
    scores: list[float],
    decision: str,
    votes: str,
) -> None:
    _judged_scenario(project)
    # The panel asks its judges in the order named, each its samples in turn, through the
    # Anthropic and the OpenAI clients.
    server.script_attempts_containing(PROMPT, [_answer(s) for s in scores])
    result = pytester.runpytest(
        "--llm-summary=full",
        "--llm-judge-model=haiku,gpt-5-mini,sonnet",
        f"--llm-judge-samples={samples}",
        "--llm-report=out",
    )
    result.assert_outcomes(**{"passed" if decision == "pass" else "failed": 1})
    report = read_report(pytester)
    ev = report["scenarios"][0]["evaluation"]
    assert ev["judge_decision"] == decision
    assert votes in ev["judge_verdict"]
    assert [o["model"] for o in ev["judge_panel"]] == ["haiku", "gpt-5-mini", "sonnet"]
    assert ev["judge_interval"] is None  # one interval per judge, in judge_panel
    asked = [r.body.get("model") for r in server.requests]
    models = ["claude-haiku-4-5", "gpt-5-mini", "claude-sonnet-4-6"]
    assert asked == [m for m in models for _ in range(samples)]
    alpha = report["scenario_summary"]["oracle"]["panel_alpha"]
    if samples == 1:
        # One item, each criterion one unit of the judges' scores (0.8, 0.9, 0.3).
        # Per criterion: one unit alone has D_o = D_e, alpha = 0.
        # Overall: two such units, n = 6. D_o = 2 * (2 (0.01 + 0.25 + 0.36) / 2) / 6 = 0.62/3;
        # D_e: mean 2/3, sum (v - mean)^2 = 0.41333, 2 * 6 * 0.41333 / 30 = 0.16533;
        # alpha = 1 - 0.20667 / 0.16533 = -0.25: the judges disagree more than chance.
        assert alpha == pytest.approx({"correctness": 0.0, "efficiency": 0.0, "overall": -0.25})
        result.stdout.fnmatch_lines(
            [
                "judge [[]oracle]: panel Krippendorff alpha: correctness 0.00, "
                "efficiency 0.00, overall -0.25"
            ]
        )


# --------------------------------------------------------------------------- calibration

RUBRIC = """\
criteria:
  - {id: a, weight: 0.5, description: The first thing.}
  - {id: b, weight: 0.5, description: The second thing.}
"""
# The people's score of each transcript (both criteria), and their verdict at 0.5.
HUMAN = [0.1, 0.2, 0.4, 0.6, 0.8]
LABEL_RUBRIC = Rubric.model_validate(yaml.safe_load(RUBRIC))
REVERSED = Rubric(criteria=list(reversed(LABEL_RUBRIC.criteria)))
LENIENCY = 0.2


def _labels(root: Path, human: list[float] = HUMAN) -> Path:
    (root / "rubric.yaml").write_text(RUBRIC)
    lines = [
        {
            "id": f"case{i}",
            "task": "Do the thing.",
            "transcript": f"transcript number {i}",
            "rubric": "rubric.yaml",
            "pass_threshold": 0.5,
            "scores": {"a": h, "b": h},
            "verdict": "pass" if h >= 0.5 else "fail",
        }
        for i, h in enumerate(human)
    ]
    path = root / "labels.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _lenient_judge(server: FakeLLMServer, human: list[float] = HUMAN) -> None:
    """A judge LENIENCY above the people on both criteria; asked with the criteria in reverse
    order it scores `a` 0.1 lower (an order effect of 0.1 on `a`, 0.05 overall)."""
    for i, h in enumerate(human):
        score = round(h + LENIENCY, 6)
        rest = {"weighted_score": score, "confidence": 1, "issues": [], "highlights": []}
        forward = {"scores": {"a": score, "b": score}, **rest}
        flipped = {"scores": {"a": round(score - 0.1, 6), "b": score}, **rest}
        transcript = f"transcript number {i}"
        for rubric, reply in ((LABEL_RUBRIC, forward), (REVERSED, flipped)):
            prompt = judge_prompt("Do the thing.", transcript, rubric)
            server.script(prompt, [Turn(text=json.dumps(reply))])


def test_calibrate_prints_the_hand_computed_statistics(
    tmp_path: Path, server: FakeLLMServer, capsys: pytest.CaptureFixture[str]
) -> None:
    labels = _labels(tmp_path)
    _lenient_judge(server)
    status = cli.main(["judge", "calibrate", str(labels), "--judge-model=haiku"])
    out = capsys.readouterr().out
    assert status == 0, out
    # People: 0.1 0.2 0.4 0.6 0.8 (verdicts fail fail fail pass pass at 0.5); the judge
    # 0.3 0.4 0.6 0.8 1.0 on each criterion, so it decides fail fail PASS pass pass.
    # agreement 4/5 = 0.80; kappa: p_e = 3/5 * 2/5 + 2/5 * 3/5 = 12/25,
    #   (4/5 - 12/25) / (13/25) = 8/13 = 0.62.
    # alpha (interval) over the units (0.3, 0.1), (0.4, 0.2), (0.6, 0.4), (0.8, 0.6),
    #   (1.0, 0.8): D_o = 5 * (2 * 0.2^2 / 1) / 10 = 0.04; the ten values have mean 0.52 and
    #   sum (v - mean)^2 = 3.46 - 10 * 0.52^2 = 0.756, D_e = 2 * 10 * 0.756 / 90 = 0.168;
    #   alpha = 1 - 0.04 / 0.168 = 16/21 = 0.76.
    # leniency +0.20, the same on every label (a zero-width interval).
    # order bias: `a` moves 0.1 with the criteria reversed, `b` not at all; the weighted
    #   score 0.05 (= 0.5 * 0.1).
    lines = [line.split() for line in out.splitlines()]
    row = {line[0]: line[1:] for line in lines if line and line[0] in ("a", "b", "(verdict)")}
    assert row["a"] == ["5", "0.80", "0.62", "0.76", "+0.20", "[+0.20,", "+0.20]", "0.10"]
    assert row["b"] == ["5", "0.80", "0.62", "0.76", "+0.20", "[+0.20,", "+0.20]", "0.00"]
    assert row["(verdict)"] == ["5", "0.80", "0.62", "0.76", "+0.20", "[+0.20,", "+0.20]", "0.05"]
    # Each label judged twice (the reversed order too): 10 calls, at haiku's prices.
    assert "haiku (1 samples) on 5 labels: 10 calls" in out

    # Repeated samples: each label asked twice (the same answer), no reversed order.
    args = ["judge", "calibrate", str(labels), "--judge-model=haiku", "--json"]
    assert cli.main([*args, "--samples=2", "--no-order-check"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["samples"], data["calls"]) == (2, 10)
    overall = data["criteria"][-1]
    assert overall["kappa"] == pytest.approx(8 / 13)
    assert overall["alpha"] == pytest.approx(16 / 21)
    assert overall["leniency"]["estimate"] == pytest.approx(LENIENCY)
    assert overall["order_bias"] is None


@pytest.mark.parametrize(
    ("gate", "status", "said"),
    [
        ("kappa=0.6,alpha=0.7", 0, "judge agrees with the labels (kappa >= 0.6, alpha >= 0.7)"),
        ("kappa=0.7", 9, "judge drifted from the labels: kappa 0.62 < 0.7"),
        ("0.9", 9, "agreement 0.80 < 0.9"),
    ],
)
def test_calibrate_gates_on_agreement(
    tmp_path: Path,
    server: FakeLLMServer,
    capsys: pytest.CaptureFixture[str],
    gate: str,
    status: int,
    said: str,
) -> None:
    labels = _labels(tmp_path)
    _lenient_judge(server)
    args = ["judge", "calibrate", str(labels), "--judge-model=haiku", "--no-order-check"]
    assert cli.main([*args, f"--min-agreement={gate}"]) == status
    out = capsys.readouterr().out
    assert said in out
    assert "5 labels: 5 calls" in out  # no reversed-order calls


def test_calibrate_cannot_decide_on_too_few_labels(
    tmp_path: Path, server: FakeLLMServer, capsys: pytest.CaptureFixture[str]
) -> None:
    human = HUMAN[: MIN_LABELS - 1]
    labels = _labels(tmp_path, human)
    _lenient_judge(server, human)
    args = ["judge", "calibrate", str(labels), "--judge-model=haiku", "--min-agreement=0.5"]
    assert cli.main(args) == 7
    assert f"cannot decide: 4 usable labels, at least {MIN_LABELS} needed" in (
        capsys.readouterr().out
    )


def test_calibrate_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    labels = _labels(tmp_path)
    assert cli.main(["judge", "calibrate", str(labels), "--judge-model=oracle"]) == 2
    assert "a judge must be a real model" in capsys.readouterr().err
    missing = ["judge", "calibrate", str(tmp_path / "nope.jsonl"), "--judge-model=haiku"]
    assert cli.main(missing) == 2
    assert "nope.jsonl: cannot be read" in capsys.readouterr().err


def test_malformed_label_lines_are_errors_naming_file_and_line(
    tmp_path: Path, server: FakeLLMServer, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _labels(tmp_path)
    good = path.read_text().splitlines()
    bad = [
        "{not json",
        json.dumps({**json.loads(good[0]), "verdict": "maybe"}),
        json.dumps({**json.loads(good[0]), "scores": {"a": 0.5, "c": 0.5}}),
        json.dumps({**json.loads(good[0]), "scores": {"a": 1.5, "b": 0.5}}),
        json.dumps({k: v for k, v in json.loads(good[0]).items() if k != "transcript"}),
        "[1, 2]",
    ]
    path.write_text("\n".join([*good, "", *bad]) + "\n")
    labels, problems = load_labels(path)
    assert len(labels) == 5
    assert problems == [
        f"{path}:7: not valid JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)",
        f"{path}:8: verdict: Input should be 'pass' or 'fail'",
        f"{path}:9: scores: missing b; not in the rubric: c",
        f"{path}:10: scores.a: 1.5 is outside 0..1",
        f"{path}:11: give exactly one of transcript or item (report and nodeid)",
        f"{path}:12: expected a mapping, got list",
    ]
    # The rest is still judged; the command says what it skipped and exits 2.
    _lenient_judge(server)
    status = cli.main(["judge", "calibrate", str(path), "--judge-model=haiku"])
    out = capsys.readouterr().out
    assert status == 2
    assert f"{path}:8: verdict" in out
    assert "6 labels could not be read (exit status 2)" in out


def test_yaml_labels_name_their_line_and_may_come_from_a_report(tmp_path: Path) -> None:
    (tmp_path / "rubric.yaml").write_text(RUBRIC)
    report = {
        "scenarios": [
            {
                "nodeid": "s.yaml::x[haiku]",
                "trace": {
                    "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                    "llm_calls": [],
                    "tool_calls": [],
                    "turns": 1,
                    "natural_stop": True,
                },
            }
        ]
    }
    (tmp_path / "report.json").write_text(json.dumps(report))
    path = tmp_path / "labels.yaml"
    path.write_text(
        "labels:\n"
        "  - item: {report: report.json, nodeid: 's.yaml::x[haiku]'}\n"
        "    rubric: rubric.yaml\n"
        "    scores: {a: 1, b: 1}\n"
        "    verdict: pass\n"
        "  - transcript: t\n"
        "    rubric: {criteria: [{id: a, weight: 1, description: d}]}\n"
        "    scores: {a: 1}\n"
        "    verdict: pass\n"
        "    colour: red\n"
        "  - item: {report: report.json, nodeid: other}\n"
        "    rubric: rubric.yaml\n"
        "    scores: {a: 1, b: 1}\n"
        "    verdict: fail\n"
    )
    labels, problems = load_labels(path)
    assert [label.where for label in labels] == [f"{path}:2"]
    assert labels[0].transcript == [Entry(role="user", kind="text", content="hi")]
    assert problems == [
        f"{path}:6: colour: Extra inputs are not permitted",
        f"{path}:11: item.nodeid: no item 'other' in {tmp_path / 'report.json'}",
    ]


def _pytest_labels(pytester: pytest.Pytester, human: list[float] = HUMAN) -> None:
    _labels(pytester.path, human)


@pytest.mark.parametrize(
    ("gate", "human", "status", "said"),
    [
        ("kappa=0.6", HUMAN, 0, "*judge agrees with the labels (kappa >= 0.6) (exit status 0)"),
        ("kappa=0.7", HUMAN, 9, "*judge drifted from the labels: kappa 0.62 < 0.7 (exit status 9)"),
        ("kappa=0.5", HUMAN[:3], 7, "*cannot decide: 3 usable labels*(exit status 7)"),
    ],
)
def test_a_pytest_run_gates_on_the_labels(
    pytester: pytest.Pytester,
    server: FakeLLMServer,
    gate: str,
    human: list[float],
    status: int,
    said: str,
) -> None:
    _pytest_labels(pytester, human)
    _lenient_judge(server, human)
    result = pytester.runpytest(
        "--llm-judge-labels=labels.jsonl",
        "--llm-judge-model=haiku",
        f"--llm-judge-min-agreement={gate}",
    )
    assert result.ret == status
    result.stdout.fnmatch_lines(["*llmtool judge calibration*", "(verdict)*", said])


def test_pytest_labels_options_are_checked(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--llm-judge-min-agreement=0.8")
    result.stderr.fnmatch_lines(["*--llm-judge-min-agreement needs --llm-judge-labels=PATH"])
    result = pytester.runpytest("--llm-judge-labels=x.jsonl")
    result.stderr.fnmatch_lines(["*--llm-judge-labels needs --llm-judge-model=NAMES"])
    result = pytester.runpytest("--llm-judge-samples=0")
    result.stderr.fnmatch_lines(["*--llm-judge-samples: expected an integer >= 1, got '0'"])
