"""The shipped `report.schema.json`: current with the models, and every written report obeys it.

The reports are checked against a closed copy of the schema (no keys it does not name), so a
report that validates is wholly described by the schema a reader gets.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from helpers import read_report, scenario, schema_errors, write_scenario
from jsonschema import Draft202012Validator

from pytest_llmtool.records import SCHEMA_PATH, EvalReport, report_schema

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
UPSTREAM = ROOT.parent / "shared" / "datasets" / "bashkit-eval"


def test_the_shipped_schema_is_the_one_the_models_generate() -> None:
    shipped = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert shipped == json.loads(report_schema()), (
        f"{SCHEMA_PATH.name} is out of date with records.py; "
        "regenerate it with `python -m pytest_llmtool.records`"
    )


def test_the_schema_is_valid_and_names_every_field_computed_ones_included() -> None:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    assert set(schema["properties"]) == set(EvalReport.model_fields)
    trace = schema["$defs"]["AgentTrace"]["properties"]
    assert {"tool_call_count", "last_tool_response", "cost_usd"} <= set(trace)


def test_the_schema_is_package_data() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["pytest_llmtool"]
    assert any(fnmatch.fnmatch(SCHEMA_PATH.name, p) for p in patterns), patterns
    assert SCHEMA_PATH.parent == ROOT / "pytest_llmtool"


def test_a_report_that_breaks_the_schema_is_caught() -> None:
    """The check below is not vacuous: a wrong type and an unknown key are both errors."""
    report = {"schema_version": "one", "metadata": {}, "surprise": 1}
    errors = schema_errors(report, closed=True)
    assert any(e.startswith("schema_version: 'one' is not of type 'integer'") for e in errors)
    assert any("'surprise' was unexpected" in e for e in errors)
    assert any(e.startswith("metadata: 'plugin' is a required property") for e in errors)


def _closed_valid(pytester: pytest.Pytester) -> dict[str, Any]:
    report = read_report(pytester)
    assert schema_errors(report, closed=True) == []
    return report


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_examples_report_validates(pytester: pytest.Pytester, workers: list[str]) -> None:
    shutil.copytree(EXAMPLES, pytester.path / "examples", symlinks=True)
    result = pytester.runpytest(
        "examples",
        "--llm-model=oracle,nop",
        "--llm-tool-mode=scripted,baseline",
        "--llm-report=out",
        *workers,
    )
    # 50 bash tasks (3 in today's bashkit-eval format), 4 scripting-tool tasks in 2 tool
    # modes, 10 scenario items (one compares two guidance files, two target an MCP server,
    # three are written for ax-eval) and 3 optimization tasks, each once per model: the oracle
    # replays every reference solution, nop does nothing. nop's speedup is noise around 1x
    # whose 95% interval reaches below the tasks' min_speedup of 1.5: it never passes. The
    # oracle passes when its interval clears 1.5, which a loaded machine's noise can prevent:
    # the item's outcome then follows its recorded `passed`, as every output does.
    report = _closed_valid(pytester)
    optimization = report["optimization_results"]
    assert not any(r["passed"] for r in optimization if r["agent"] == "nop:nop")
    missed = [r for r in optimization if r["agent"] == "oracle:oracle" and not r["passed"]]
    # And 2 Harbor tasks (the oracle passes them, nop fails them), which skip where no
    # container can run (examples/harbor/conftest.py).
    harbor = 2 if report["harbor_results"] else 0
    result.assert_outcomes(
        passed=71 + harbor - len(missed),
        failed=71 + harbor + len(missed),
        skipped=4 - 2 * harbor,
    )
    assert all(
        r["metrics"]["success"] and r["metrics"]["task_speedup"] > 1.5
        for r in report["optimization_results"]
        if r["agent"] == "oracle:oracle"
    )
    counts = (len(report["results"]), len(report["scenarios"]), len(report["optimization_results"]))
    assert (counts, report["errors"]) == ((116, 20, 6), [])
    assert set(report["tool_modes"]) == {"oracle", "nop"}


@pytest.mark.skipif(not UPSTREAM.is_dir(), reason="../shared is not present")
def test_the_upstream_datasets_report_validates(pytester: pytest.Pytester) -> None:
    shutil.copytree(UPSTREAM, pytester.path / "bashkit-eval")
    result = pytester.runpytest("bashkit-eval", "--llm-model=oracle,nop", "--llm-report=out")
    # 75 tasks (58 + 3 bash, 14 scripting-tool ones in the default scripted mode) have no
    # solution: the oracle skips them and nop fails them.
    result.assert_outcomes(failed=75, skipped=75)
    report = _closed_valid(pytester)
    assert (len(report["results"]), report["errors"]) == (75, [])


def test_a_scenario_report_with_errors_and_guidance_validates(
    pytester: pytest.Pytester, project: Path
) -> None:
    write_scenario(project, scenario(guidance=["v1.md", "v2.md"]), name="compared")
    write_scenario(project, scenario(name="plain"), name="plain")
    write_scenario(project, scenario(name="broken", setup={"commands": ["note bogus"]}), "broken")
    write_scenario(project, scenario(name="bad", tier="high"), name="bad.scenario")
    result = pytester.runpytest("--llm-model=oracle,nop", "--llm-report=out")
    # (2 guidance files + 1 plain) x 2 models run; the failing setup errors once per model,
    # the invalid scenario once.
    result.assert_outcomes(passed=3, failed=3, errors=3)
    report = _closed_valid(pytester)
    assert sorted(r["guidance"] or "" for r in report["scenarios"]) == [
        "",
        "",
        "v1.md",
        "v1.md",
        "v2.md",
        "v2.md",
    ]
    assert len(report["errors"]) == 3
    assert set(report["scenario_summary"]) == {"oracle", "nop"}
