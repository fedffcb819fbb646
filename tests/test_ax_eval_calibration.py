"""ax-eval's calibration suites in `llmtool judge calibrate` and `--llm-judge-labels`: the
figures worked out by hand for a scripted judge (the fake server, offline), the exit
statuses, the shipped suite, and suites that try to read outside their directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_llm_server import FakeLLMServer, Fault, Turn

from pytest_llmtool import cli
from pytest_llmtool.agents.judge import DEFAULT_RUBRIC
from pytest_llmtool.history.calibrate import (
    EXIT_BAD_LABELS,
    EXIT_DRIFT,
    EXIT_UNDECIDED,
    LabelsError,
    load_calibration,
)
from pytest_llmtool.history.suite import Suite, in_band, signed_error

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "calibration"
SHIPPED = EXAMPLES / "tasks_calibration.yaml"
BANDS = {  # ax-eval's bundled bands, which the shipped suite keeps
    "flawless": (0.88, 1.0),
    "recovered": (0.82, 0.93),
    "sloppy_success": (0.50, 0.70),
    "partial": (0.25, 0.42),
    "failed": (0.0, 0.20),
}


def _answer(score: float, level: int | None = None) -> str:
    """A judge answer scoring every default criterion `score`, so the weighted score is it."""
    body: dict[str, Any] = {
        "scores": {cid: score for cid in DEFAULT_RUBRIC.ids},
        "weighted_score": score,
        "confidence": 0.9,
        "issues": [],
        "highlights": [],
        "rationale": "scripted",
    }
    if level is not None:
        body["prescriptiveness"] = {"level": level, "rationale": "scripted"}
    return json.dumps(body)


def _suite(root: Path, cases: list[dict[str, Any]], **top: Any) -> Path:
    """A suite in `root` whose case `name` has the transcript `transcript of <name>`, unless
    the case gives its own `transcript` path."""
    (root / "transcripts").mkdir(exist_ok=True)
    written = []
    for case in cases:
        case = dict(case)
        if "transcript" not in case:
            (root / "transcripts" / f"{case['name']}.txt").write_text(
                f"$ tasks list\ntranscript of {case['name']}\n"
            )
            case["transcript"] = f"transcripts/{case['name']}.txt"
        written.append(case)
    data = {"target": {"binary": "tasks"}, "task": {"prompt": "Capture the to-dos."}, **top}
    path = root / "suite.yaml"
    path.write_text(yaml.safe_dump({**data, "cases": written}, sort_keys=False))
    return path


def _band(name: str) -> dict[str, Any]:
    low, high = BANDS[name]
    return {"name": name, "label": f"the {name} run", "expected": {"min": low, "max": high}}


def _judge(server: FakeLLMServer, replies: dict[str, list[str]]) -> None:
    """Each case's judge conversation (told apart by its transcript) gets these replies."""
    for name, texts in replies.items():
        server.script_containing(f"transcript of {name}", [Turn(text=t) for t in texts])


def _calibrate(path: Path, *extra: str) -> list[str]:
    return ["judge", "calibrate", str(path), "--judge-model=haiku", *extra]


# ------------------------------------------------------------------------- the figures


def test_band_membership_is_inclusive_within_1e_9() -> None:
    assert in_band(0.88, 0.88, 1.0) and in_band(1.0, 0.88, 1.0)
    assert in_band(0.88 - 1e-10, 0.88, 1.0) and in_band(1.0 + 1e-10, 0.88, 1.0)
    assert not in_band(0.88 - 1e-8, 0.88, 1.0) and not in_band(1.0 + 1e-8, 0.88, 1.0)
    assert signed_error(0.85, 0.0, 0.2) == pytest.approx(0.75)
    assert signed_error(0.05, 0.0, 0.2) == pytest.approx(-0.05)


def test_the_figures_of_a_scripted_judge_by_hand(
    tmp_path: Path, server: FakeLLMServer, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _suite(tmp_path, [_band(n) for n in BANDS])
    # Scores on the bounds are in band; `partial` 0.50 is above its band.
    _judge(
        server,
        {
            "flawless": [_answer(0.88, level=0)],
            "recovered": [_answer(0.93, level=3)],
            "sloppy_success": [_answer(0.5)],
            "partial": [_answer(0.5)],
            "failed": [_answer(0.2)],
        },
    )
    status = cli.main([*_calibrate(path), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert status == EXIT_DRIFT == 9
    cases = {c["name"]: c for c in data["cases"]}
    # signed errors: 0.88 - 0.94 = -0.06, 0.93 - 0.875 = +0.055, 0.5 - 0.6 = -0.1,
    # 0.5 - 0.335 = +0.165, 0.2 - 0.1 = +0.1; their mean: 0.16 / 5 = +0.032.
    expected = {
        "flawless": -0.06,
        "recovered": 0.055,
        "sloppy_success": -0.1,
        "partial": 0.165,
        "failed": 0.1,
    }
    for name, error in expected.items():
        assert cases[name]["signed_error"] == pytest.approx(error)
    assert [c["in_band"] for c in data["cases"]] == [True, True, True, False, True]
    assert data["leniency_index"] == pytest.approx(0.032)
    assert (data["scored"], data["in_band"], data["did_not_run"]) == (5, 4, 0)
    assert data["out_of_band"] == ["partial"]
    # adjusted = weighted * (1 - level/3 * 0.5): 0.88 at level 0, 0.93 * 0.5 at level 3.
    assert cases["flawless"]["adjusted_score"] == pytest.approx(0.88)
    assert cases["recovered"]["adjusted_score"] == pytest.approx(0.465)
    assert cases["recovered"]["prescriptiveness"] == 3
    assert data["reason"] == "judge out of band on 1 of 5 scored cases: partial"

    # The table as a person reads it (ax-eval's columns, then ours).
    assert cli.main(_calibrate(path)) == EXIT_DRIFT
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert rows["Case"][:7] == ["Case", "Target", "Score", "Adj", "Signed", "Presc", "In"]
    assert rows["partial"][:7] == ["partial", "0.25-0.42", "0.50", "-", "+0.17", "-", "NO"]
    assert rows["recovered"][:7] == ["recovered", "0.82-0.93", "0.93", "0.47", "+0.06", "3", "yes"]
    assert "In band: 4/5 scored (0 case(s) did not run)" in out
    assert "Leniency index (mean signed error): +0.032" in out
    assert "(exit status 9)" in out


@pytest.mark.parametrize(
    ("replies", "status", "said"),
    [
        ({"flawless": [_answer(0.9)], "failed": [_answer(0.1)]}, 0, "every case in band (2/2)"),
        ({"flawless": [_answer(0.9)], "failed": [_answer(0.3)]}, 9, "out of band on 1 of 2"),
        # The judge answers nonsense twice on `failed`: it did not run; the suite cannot pass.
        ({"flawless": [_answer(0.9)], "failed": ["no", "still no"]}, 7, "1 case(s) did not run"),
        ({"flawless": ["no", "no"], "failed": ["no", "no"]}, 7, "no case scored"),
    ],
)
def test_exit_statuses(
    tmp_path: Path,
    server: FakeLLMServer,
    capsys: pytest.CaptureFixture[str],
    replies: dict[str, list[str]],
    status: int,
    said: str,
) -> None:
    path = _suite(tmp_path, [_band("flawless"), _band("failed")])
    _judge(server, replies)
    assert cli.main(_calibrate(path)) == status
    out = capsys.readouterr().out
    assert f"{said}" in out and f"(exit status {status})" in out
    if status == EXIT_UNDECIDED:
        assert "failed: did not run: 1 of 1 judge answers invalid" in out


def test_a_case_whose_judge_cannot_be_asked_did_not_run(
    tmp_path: Path, server: FakeLLMServer, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _suite(tmp_path, [_band("flawless"), _band("failed")])
    _judge(server, {"flawless": [_answer(0.9)], "failed": [_answer(0.1)]})
    server.fail_next(Fault.unauthorized())  # the first case's call: a provider error
    assert cli.main(_calibrate(path)) == EXIT_UNDECIDED
    out = capsys.readouterr().out
    assert "flawless: did not run: the judge could not be asked" in out
    assert "In band: 1/1 scored (1 case(s) did not run)" in out
    # The cost limit stops the judging: every case left did not run, and nothing passes.
    assert cli.main([*_calibrate(path), "--max-cost=0.000001"]) == EXIT_UNDECIDED
    out = capsys.readouterr().out
    assert "failed: did not run: not judged" in out
    assert "cannot decide: no case scored (exit status 7)" in out


def test_samples_are_averaged_with_their_interval(
    tmp_path: Path, server: FakeLLMServer, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _suite(tmp_path, [_band("flawless")])
    server.script_attempts_containing(
        "transcript of flawless", [[Turn(text=_answer(s))] for s in (0.9, 1.0, 0.95)]
    )
    assert cli.main([*_calibrate(path), "--samples=3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    case = data["cases"][0]
    assert case["score"] == pytest.approx(0.95)
    assert case["signed_error"] == pytest.approx(0.95 - 0.94)
    # t interval of (0.9, 1.0, 0.95): SD 0.05, half width 4.303 * 0.05 / sqrt(3) = 0.1242,
    # cut to 0..1.
    assert case["interval"]["low"] == pytest.approx(0.8258, abs=1e-4)
    assert case["interval"]["high"] == 1.0
    assert (data["samples"], data["calls"]) == (3, 3)


def test_a_labels_file_and_a_suite_through_the_same_command(
    tmp_path: Path, server: FakeLLMServer, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "labels").mkdir()
    labels = tmp_path / "labels" / "labels.jsonl"
    label = {
        "transcript": "transcript of a label",
        "rubric": {"criteria": [{"id": "a", "weight": 1, "description": "d"}]},
        "scores": {"a": 0.8},
        "verdict": "pass",
    }
    labels.write_text(json.dumps(label) + "\n")
    server.script_containing(
        "transcript of a label",
        [Turn(text=json.dumps({"scores": {"a": 0.8}, "weighted_score": 0.8, "confidence": 1}))],
    )
    assert cli.main([*_calibrate(labels), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["labels"] == 1
    suite = _suite(tmp_path, [_band("failed")])
    _judge(server, {"failed": [_answer(0.1)]})
    assert cli.main([*_calibrate(suite), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "ax-eval"
    # A gate on agreement means nothing for a suite: a usage error, not a silent pass.
    assert cli.main([*_calibrate(suite), "--min-agreement=0.8"]) == 2
    assert "its bands are its gate" in capsys.readouterr().err


def test_a_file_that_is_neither_says_what_it_lacks(tmp_path: Path) -> None:
    path = tmp_path / "other.yaml"
    path.write_text("target: {binary: tasks}\ntask: {prompt: x}\n")
    with pytest.raises(LabelsError, match=r"neither a labels file .* found a mapping with keys "):
        load_calibration(path)


# ------------------------------------------------------------------------ the shipped suite


def test_the_shipped_suite_loads_and_runs_end_to_end(
    tmp_path: Path, server: FakeLLMServer, capsys: pytest.CaptureFixture[str]
) -> None:
    suite, problems = load_calibration(SHIPPED)
    assert isinstance(suite, Suite) and problems == []
    assert {c.name: (c.low, c.high) for c in suite.cases} == BANDS
    assert suite.rubric == DEFAULT_RUBRIC and suite.discount == 0.5
    assert "tasks" in suite.target
    # Each transcript told apart by a line only it has; the judge scores each mid-band.
    marks = {
        "flawless": "The list is set up",
        "recovered": "I'll use high",
        "sloppy_success": "I added the dentist task twice",
        "partial": "Let me know if you want anything else",
        "failed": "plain file instead",
    }
    for name, mark in marks.items():
        low, high = BANDS[name]
        server.script_containing(mark, [Turn(text=_answer(round((low + high) / 2, 6)))])
    assert cli.main(_calibrate(SHIPPED)) == 0
    out = capsys.readouterr().out
    assert "In band: 5/5 scored (0 case(s) did not run)" in out
    assert "Leniency index (mean signed error): +0.000" in out
    # The failed case's guidance reached its judge, as the agent's AGENTS.md would.
    bodies = [json.dumps(r.body) for r in server.requests]
    prompts = [b for b in bodies if "plain file instead" in b]
    assert prompts and "do not edit" in prompts[0]
    assert not any("do not edit" in b for b in bodies if "plain file instead" not in b)


def test_pytest_does_not_collect_a_suite_as_a_scenario(pytester: pytest.Pytester) -> None:
    shutil.copytree(EXAMPLES, pytester.path / "calibration")
    result = pytester.runpytest("calibration", "--llm-model=nop")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, result.stdout.str()
    # Even where a pattern names it as a scenario (`scenarios/*.yaml`): not a broken one.
    shutil.copytree(EXAMPLES, pytester.path / "scenarios")
    result = pytester.runpytest("scenarios", "--llm-model=nop", "--llm-explain-collect")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, result.stdout.str()
    result.stdout.fnmatch_lines(["*tasks_calibration.yaml: left alone: *calibration suite*"])


def test_a_pytest_run_judges_a_suite(pytester: pytest.Pytester, server: FakeLLMServer) -> None:
    path = _suite(pytester.path, [_band("flawless"), _band("failed")])
    _judge(server, {"flawless": [_answer(0.9)], "failed": [_answer(0.5)]})
    result = pytester.runpytest(f"--llm-judge-labels={path.name}", "--llm-judge-model=haiku")
    assert result.ret == EXIT_DRIFT
    result.stdout.fnmatch_lines(
        [
            "*llmtool judge calibration*",
            "failed*0.00-0.20*0.50*NO*",
            "*judge out of band on 1 of 2 scored cases: failed (exit status 9)",
        ]
    )


# ------------------------------------------------------------------------------- attacks


@pytest.mark.parametrize(
    ("case", "problem"),
    [
        ({"transcript": "../../etc/passwd"}, "transcript: '../../etc/passwd' resolves outside"),
        ({"transcript": "/etc/passwd"}, "transcript: '/etc/passwd' is an absolute path"),
        ({"transcript": "escape.txt"}, "transcript: 'escape.txt' resolves outside"),
        ({"expected": {"min": 0.7, "max": 0.5}}, "expected: min 0.7 is above max 0.5"),
        ({"expected": {"min": 0.5, "max": 1.2}}, "expected.max: 1.2 is outside 0..1"),
        ({"expected": {"min": -0.1, "max": 0.2}}, "expected.min: -0.1 is outside 0..1"),
        ({"expected": {"min": 0.1}}, "expected.max: Field required"),
        ({"guidence": "typo"}, "guidence: Extra inputs are not permitted"),
    ],
)
def test_a_bad_case_is_refused_naming_file_case_and_key_the_others_still_run(
    tmp_path: Path,
    server: FakeLLMServer,
    capsys: pytest.CaptureFixture[str],
    case: dict[str, Any],
    problem: str,
) -> None:
    root = tmp_path / "suite"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("not for the judge")
    (root / "escape.txt").symlink_to(tmp_path / "secret.txt")  # a link out of the directory
    bad = {**_band("partial"), **case}
    path = _suite(root, [_band("flawless"), bad])
    suite, problems = load_calibration(path)
    assert isinstance(suite, Suite) and [c.name for c in suite.cases] == ["flawless"]
    assert len(problems) == 1 and problems[0].startswith(f"{path}:")
    assert "case 'partial': " + problem in problems[0]
    _judge(server, {"flawless": [_answer(0.9)]})
    assert cli.main(_calibrate(path)) == EXIT_BAD_LABELS
    out = capsys.readouterr().out
    assert "case 'partial'" in out and "1 cases could not be read (exit status 2)" in out
    assert all("not for the judge" not in json.dumps(r.body) for r in server.requests)


def test_a_suite_that_cannot_be_used_names_its_line_and_key(tmp_path: Path) -> None:
    path = _suite(tmp_path, [_band("flawless")], target={"kind": "mpc", "name": "x"})
    with pytest.raises(LabelsError, match=r"suite.yaml:1: target.kind: 'mpc' is not one of"):
        load_calibration(path)
    path = _suite(tmp_path, [_band("flawless")], rubric="../rubric.yaml")
    with pytest.raises(LabelsError, match=r"suite.yaml:\d+: rubric: .* resolves outside"):
        load_calibration(path)
    path = _suite(tmp_path, [_band("flawless")], prescriptiveness_discount=2)
    with pytest.raises(LabelsError, match=r"prescriptiveness_discount: Input should be less"):
        load_calibration(path)
