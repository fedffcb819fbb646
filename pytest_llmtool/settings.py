"""Options: every `--llm-x` flag has an `llm_x` ini key; the flag wins, then the ini, then
the default. They are resolved and checked once, in `pytest_configure`, so a bad value is a
one-line usage error before anything runs."""

from __future__ import annotations

import importlib.util
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pytest_llmtool.agents.models import ModelEntry
    from pytest_llmtool.agents.pricing import Price
    from pytest_llmtool.agents.registry import ModelRef
    from pytest_llmtool.agents.retry import RetryPolicy
    from pytest_llmtool.inputs.harbor_variants import HarborVariant
    from pytest_llmtool.records import ModelParams, ToolMode
    from pytest_llmtool.stats.task_rule import TaskRule


@dataclass(frozen=True)
class OptionDef:
    name: str
    metavar: str
    default: str
    help: str
    # The value a bare flag takes (`--llm-resume`); the flag's value is optional then.
    const: str | None = None
    # A switch: the bare flag means true and takes no value (so `--flag tests/` reads right);
    # the ini key sets it either way.
    switch: bool = False
    # May be given more than once; the values are joined one per line, as in the ini.
    repeat: bool = False
    # The ini key's type, as pytest reads it (so a TOML config may write `llm_trials = 3`);
    # a flag's text is checked the same way, booleans spelled true or false.
    type: Literal["string", "bool", "int", "float"] = "string"


OPTIONS = (
    OptionDef(
        "llm_model",
        "NAMES",
        "oracle",
        "comma-separated models to evaluate; each task runs once per model (offline: oracle, nop)",
    ),
    OptionDef(
        "llm_models",
        "FILE",
        "",
        "a TOML file of [models.NAME] tables (protocol, model, base_url, api_key_env, headers, "
        "params, price, concurrency), beside pyproject.toml's [tool.llmtool.models.NAME]; "
        "its entry wins for a name both define",
    ),
    OptionDef(
        "llm_max_turns", "N", "10", "model calls allowed per task before it is cut off", type="int"
    ),
    OptionDef(
        "llm_trials",
        "N",
        "1",
        "attempts per task and model, each its own item in its own sandbox (pass@k, flakiness)",
        type="int",
    ),
    OptionDef(
        "llm_task_pass",
        "K/N|FRACTION",
        "",
        "with --llm-trials: the passes a task needs for its own verdict, 8/10 or 0.8 "
        "(default: every trial)",
    ),
    OptionDef(
        "llm_early_stop",
        "WHAT",
        "off",
        "skip the trials that can no longer change a verdict: tasks (a task's rule is "
        "decided), compare (an anytime-valid comparison of the run's models is decided), "
        "or both (the bare flag)",
        const="tasks,compare",
    ),
    OptionDef("llm_report", "DIR", "", "write report.json and report.md into DIR"),
    OptionDef(
        "llm_summary",
        "LEVEL",
        "short",
        "the terminal summary: short (one screen: the headline, each model's summary, the "
        "failed tasks; -q shortens it further) or full (every table, as -v gives)",
    ),
    OptionDef(
        "llm_gaps",
        "DIR",
        "",
        "write the gap report into DIR (gaps.json, gaps.md): every failed tool call, "
        "classified, grouped and ranked",
    ),
    OptionDef(
        "llm_gaps_from",
        "PATHS",
        "",
        "with --llm-gaps: replay these recorded runs (report.json files or --llm-report "
        "directories) on the current sandbox and show each gap's calls then and now",
    ),
    OptionDef(
        "llm_inspect_log",
        "DIR",
        "",
        "also write the run as Inspect AI logs into DIR, one per model and kind, to open with "
        "`inspect view --log-dir DIR` (needs the inspect extra)",
    ),
    OptionDef(
        "llm_trajectories",
        "DIR",
        "",
        "write each item's trajectory as DIR/<item id>.json in Harbor's Agent Trajectory "
        "Interchange Format (ATIF v1.6), as its result arrives",
    ),
    OptionDef(
        "llm_history",
        "PATH",
        ".llmtool/history.db",
        "append every run to this SQLite database (relative to the rootdir from the ini); "
        "'off' disables it; read it with `llmtool history`",
    ),
    OptionDef(
        "llm_baseline",
        "REF",
        "",
        "compare this run with a baseline, per model over the tasks both ran: a report.json "
        "path, a history run id, or 'last' (the newest complete run with the same models and "
        "dataset)",
    ),
    OptionDef(
        "llm_fail_on_regression",
        "BOOL",
        "false",
        "let the baseline comparison decide the exit status: 0 unless a model regressed "
        "beyond noise (6) or nothing was compared (7), even with failing tasks; errors and "
        "interrupts keep theirs",
        switch=True,
        type="bool",
    ),
    OptionDef(
        "llm_allow_missing_baseline",
        "BOOL",
        "false",
        "with --llm-fail-on-regression: pass when there is no baseline to compare with (a "
        "first run in CI); an unreadable baseline or one sharing no task still fails (7)",
        switch=True,
        type="bool",
    ),
    OptionDef(
        "llm_allow_model_change",
        "BOOL",
        "false",
        "with --llm-fail-on-regression: compare a model whose name now resolves to another "
        "provider, model id, endpoint or parameters than in the baseline (else exit 7)",
        switch=True,
        type="bool",
    ),
    OptionDef(
        "llm_fail_under",
        "METRIC=VALUE",
        "",
        "fail (exit 8) when a model's pass_rate or weighted_rate is below VALUE, e.g. "
        "pass_rate=0.8; scope with [model=M,category=C,kind=K]; ':upper' judges the 95% "
        "interval's upper bound instead of the point estimate; repeatable",
        repeat=True,
    ),
    OptionDef(
        "llm_concurrency",
        "N",
        "8",
        "tasks whose agent loops may run at once in one pytest process (per worker under -n)",
        type="int",
    ),
    OptionDef(
        "llm_adaptive",
        "BOOL",
        "true",
        "adapt how many model calls are in flight per provider to its rate-limit headers and "
        "429s, within --llm-concurrency (false: a fixed window of --llm-concurrency)",
        type="bool",
    ),
    OptionDef(
        "llm_max_cost",
        "USD",
        "",
        "start no model call whose worst case (its output cap at the model's price) does not "
        "fit in what is left of this limit; a task it stops is skipped, keeping its trace; "
        "under -n at most --llm-concurrency worst cases per worker over; a model with no "
        "price or no output cap is a usage error",
    ),
    OptionDef("llm_record", "DIR", "", "store every model call's answer in DIR"),
    OptionDef(
        "llm_replay", "DIR", "", "answer model calls from the recordings in DIR (no network)"
    ),
    OptionDef(
        "llm_base_url",
        "URL",
        "",
        "base URL of an OpenAI-compatible server, or 'anthropic=URL,openai=URL'",
    ),
    OptionDef(
        "llm_prompt_cache",
        "BOOL",
        "true",
        "set Anthropic prompt-cache breakpoints (true/false)",
        type="bool",
    ),
    OptionDef("llm_retries", "N", "5", "attempts per model call on transient errors", type="int"),
    OptionDef(
        "llm_temperature",
        "T",
        "",
        "sampling temperature sent with every model call, the judge's too, over each model "
        "table entry's (default: the entry's, else the provider's)",
    ),
    OptionDef(
        "llm_max_tokens",
        "N",
        "",
        "output-token limit of every model call, the judge's too, over each model table "
        "entry's (default: the entry's, else the provider's; Anthropic requires one: 4096)",
    ),
    OptionDef(
        "llm_retry_seconds",
        "S",
        "600",
        "the longest one model call may take, retries and waits included",
        type="float",
    ),
    OptionDef(
        "llm_call_timeout",
        "S",
        "300",
        "the longest one attempt of a model call may take",
        type="float",
    ),
    OptionDef(
        "llm_retry_backoff",
        "S",
        "2",
        "first retry delay when the server gives no Retry-After",
        type="float",
    ),
    OptionDef(
        "llm_solutions",
        "PATH",
        "",
        "a reference-solutions file ({id, steps} lines) for the oracle, besides the "
        "*solutions.jsonl files found next to each dataset",
    ),
    OptionDef(
        "llm_judge_model",
        "NAMES",
        "",
        "model that judges scenarios with a rubric and bash tasks' llm_judge checks "
        "(a scenario's own judge.model wins; fallback: $LLMTOOL_JUDGE_MODEL); several, "
        "comma-separated, make a scenario judge panel decided by strict majority (bash "
        "tasks' checks use the first)",
    ),
    OptionDef(
        "llm_judge_samples",
        "K",
        "1",
        "ask each scenario judge K times per item; the verdict comes from the mean's 95% "
        "interval: pass above the threshold, fail below, else INCONCLUSIVE (a failure)",
        type="int",
    ),
    OptionDef(
        "llm_judge_when",
        "WHEN",
        "always",
        "always: ask the judge of every item that has one; undecided: only when the "
        "deterministic checks and gates have not already decided the item (the summary "
        "counts the calls saved)",
    ),
    OptionDef(
        "llm_judge_labels",
        "PATH",
        "",
        "a labels file (JSONL or YAML: transcripts with a person's scores and verdicts), or "
        "an ax-eval calibration suite (transcripts with score bands), to check the judge "
        "against at the end of the run (`llmtool judge calibrate`)",
    ),
    OptionDef(
        "llm_judge_min_agreement",
        "METRIC=VALUE",
        "",
        "with --llm-judge-labels: fail the run (exit 9) when the judge's agreement with the "
        "labels is below VALUE; metrics agreement, kappa, alpha (a bare number: agreement), "
        "comma-separated; too few labels to decide fails too (exit 7)",
    ),
    OptionDef(
        "llm_agent",
        "NAMES",
        "builtin",
        "comma-separated agents that drive the models: builtin (the plugin's own loop), "
        "claude-code, codex, opencode, gemini-cli (agent CLIs, installed with npm, run "
        "scenarios and optimization tasks); a CLI's run of model M is named AGENT/M",
    ),
    OptionDef(
        "llm_agent_cmd",
        "TEMPLATE",
        "",
        "run scenarios with an external agent: a command with {prompt}, {model}, {workdir} "
        "and {trajectory} (where it may write its ATIF trajectory)",
    ),
    OptionDef(
        "llm_agent_env",
        "NAMES",
        "",
        "environment variables passed to the external agent (e.g. its API key); "
        "nothing else of yours reaches it",
    ),
    OptionDef(
        "llm_scenarios",
        "GLOBS",
        "*.scenario.yaml *.scenario.yml *.optimization.yaml *.optimization.yml scenarios/*.yaml "
        "scenarios/*.yml",
        "file-name patterns of scenario and optimization files: a matching file with a "
        "top-level `task:` or `optimization:` key is collected, a broken one an error; a YAML "
        "file they do not name is collected only when it is a whole valid scenario or task",
    ),
    OptionDef(
        "llm_scenario_rules",
        "RULES",
        "ax-eval",
        "which rules load and score scenarios: ax-eval (its current release's) or seed "
        "(seed 004's formulas, composite.gate_weight allowed); a scenario's own `rules:` wins",
    ),
    OptionDef(
        "llm_sandbox",
        "MODE",
        "bwrap",
        "where scenario commands run: bwrap (a bubblewrap sandbox per item) or none "
        "(unisolated, as the user's own processes)",
    ),
    OptionDef(
        "llm_limits",
        "LIMITS",
        "",
        "what each command run for a scenario or optimization task may consume, over the "
        "defaults and a task's own `limits:`: procs=N,memory=SIZE,cpu=SECONDS,fsize=SIZE,"
        "disk=SIZE (e.g. procs=256,memory=2GiB)",
    ),
    OptionDef(
        "llm_datasets",
        "GLOBS",
        "*tasks.jsonl *solutions.jsonl smoke-test.jsonl repo-workflow.jsonl scripting-tool/*.jsonl",
        "file-name patterns of datasets: a matching file is collected if one of its first "
        "lines is a task object (with id and prompt), a bad line an error; a JSONL file they "
        "do not name is collected only when one of its first 20 lines is a complete task",
    ),
    OptionDef(
        "llm_max_line_bytes",
        "SIZE",
        "16MiB",
        "the longest dataset line read; a longer one is an error naming its line and size",
    ),
    OptionDef(
        "llm_max_yaml_bytes",
        "SIZE",
        "4MiB",
        "the largest scenario or optimization file read; a larger one is an error",
    ),
    OptionDef(
        "llm_explain_collect",
        "BOOL",
        "false",
        "say, for every JSONL and YAML file pytest considered and every folder kept out, "
        "whether the plugin collected it and why; runs nothing (as --collect-only)",
        switch=True,
        type="bool",
    ),
    OptionDef(
        "llm_bash",
        "SHELLS",
        "bashkit",
        "where bash tasks run: bashkit (its virtual shell), container (real bash in the "
        "plugin's image; container:IMAGE in yours), or 'bashkit,container' to run both and "
        "attribute each bashkit failure (--llm-gaps)",
    ),
    OptionDef(
        "llm_tool_mode",
        "MODES",
        "scripted",
        "how scripting-tool tasks (with mock `tools`) run: scripted (the mock tools are "
        "commands in the bash sandbox), baseline (each is its own model tool), or "
        "'scripted,baseline' to run and compare both",
    ),
    OptionDef(
        "llm_harbor_variants",
        "FILE",
        "",
        "a YAML list of agent variants every Harbor task runs under, each its own item "
        "(task[model-variant]) compared paired with the base: {id, kind: base|mcp|skills, "
        "skills_dir, mcp: {name, url|command, args}}",
    ),
    OptionDef(
        "llm_reward_threshold",
        "R",
        "1.0",
        "the reward a Harbor task's item must reach to pass (its `reward` key, or the one "
        "its task.toml [metadata] llmtool_reward_key names); a task's own [metadata] "
        "llmtool_threshold wins",
        type="float",
    ),
    OptionDef(
        "llm_harbor_jobs",
        "DIR",
        "",
        "write each Harbor item's result as Harbor's trial result.json, under "
        "DIR/<job>/<trial>/, and the job's result.json at the end, for tools that read "
        "Harbor's jobs",
    ),
    OptionDef(
        "llm_resume",
        "DIR",
        "",
        "resume a stopped run: run only the items its results journal has no result for, "
        "and report the whole run; bare, from the journal this run would write (the "
        "--llm-report DIR, else pytest's cache); --llm-resume=DIR from DIR/results.jsonl",
        const="true",
    ),
)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("llmtool", "LLM tool-use evaluations (pytest-llmtool)")
    for opt in OPTIONS:
        optional: dict[str, Any] = {} if opt.const is None else {"nargs": "?", "const": opt.const}
        if opt.switch:
            optional = {"action": "store_const", "const": "true"}
        if opt.repeat:
            optional = {"action": "append"}
        group.addoption(
            "--" + opt.name.replace("_", "-"),
            dest=opt.name,
            default=None,
            metavar=opt.metavar,
            # argparse %-formats help texts: a literal "95% interval" would crash `--help`.
            help=f"{opt.help} (ini: {opt.name}; default: {opt.default or 'none'})".replace(
                "%", "%%"
            ),
            **optional,
        )
        parser.addini(opt.name, help=opt.help, type=opt.type, default=_typed(opt))
    parser.addini(
        "llm_model_aliases",
        help="extra model aliases, one 'alias = provider:model-id' per line",
        type="linelist",
        default=[],
    )
    parser.addini(
        "llm_prices",
        help="model prices, one 'model-id = input output cache_write cache_read' per line "
        "(USD per million tokens)",
        type="linelist",
        default=[],
    )


def _typed(opt: OptionDef) -> Any:
    """The default as the ini key's type holds it."""
    if opt.type == "bool":
        return opt.default == "true"
    if opt.type in ("int", "float"):
        return {"int": int, "float": float}[opt.type](opt.default)
    return opt.default


def _ini(config: pytest.Config, name: str) -> str:
    """The ini value as text (booleans `true`/`false`); a value of the wrong type is a usage
    error naming the key."""
    try:
        value = config.getini(name)
    except (pytest.UsageError, ValueError, TypeError) as exc:
        kind = next((o.type for o in OPTIONS if o.name == name), "string")
        expected = {"bool": "true or false", "int": "an integer", "float": "a number"}
        raise pytest.UsageError(
            f"ini {name}: expected {expected.get(kind, 'text')} ({exc})"
        ) from None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def raw_option(config: pytest.Config, opt: OptionDef) -> str | None:
    """The option's text when the command line or the ini file sets it, else None."""
    cli = config.getoption(opt.name)
    if cli is not None:
        return "\n".join(cli) if isinstance(cli, list) else str(cli)
    ini = _ini(config, opt.name)
    return None if ini == str(_typed(opt)) or ini == opt.default else ini


def _raw(config: pytest.Config, name: str) -> tuple[str, bool]:
    """The option's text and whether it came from the command line."""
    cli = config.getoption(name)
    if isinstance(cli, list):  # a repeatable option
        return "\n".join(cli), True
    if cli is not None:
        return str(cli), True
    return _ini(config, name), False


def _split(value: str) -> list[str]:
    return [part for part in re.split(r"[,\s]+", value) if part]


def _number(config: pytest.Config, name: str, kind: type[float] | type[int], low: float) -> Any:
    text = _raw(config, name)[0]
    try:
        value = kind(text)
    except ValueError:
        value = None
    # NaN compares false with everything: `nan < low` would let it through.
    if value is None or not math.isfinite(value) or value < low:
        flag = "--" + name.replace("_", "-")
        noun = "an integer" if kind is int else "a number"
        raise pytest.UsageError(f"{flag}: expected {noun} >= {low:g}, got {text!r}")
    return value


def _path(config: pytest.Config, name: str) -> Path | None:
    text, from_cli = _raw(config, name)
    if not text.strip():
        return None
    # A flag is relative to where pytest was invoked; an ini value to the ini file.
    base = config.invocation_params.dir if from_cli else config.rootpath
    return base / text.strip()


def _base_urls(text: str) -> dict[str, str]:
    if not text.strip():
        return {}
    if "=" not in text:
        return {"openai": text.strip()}
    urls = {}
    for part in _split(text):
        provider, _, url = part.partition("=")
        if provider not in ("anthropic", "openai") or not url:
            raise pytest.UsageError(
                f"--llm-base-url: expected URL or 'anthropic=URL,openai=URL', got {part!r}"
            )
        urls[provider] = url
    return urls


def _history(config: pytest.Config) -> Path | None:
    if _raw(config, "llm_history")[0].strip().lower() == "off":
        return None
    return _path(config, "llm_history")


def _baseline(config: pytest.Config) -> str | Path | None:
    """A history reference (`last`, a run id) as it is; anything else is a report.json path."""
    text = _raw(config, "llm_baseline")[0].strip()
    if text == "last" or (text.isascii() and text.isdigit()):
        return text
    return _path(config, "llm_baseline")


def _flag(config: pytest.Config, name: str) -> bool:
    text = _raw(config, name)[0].strip().lower()
    if text not in ("true", "false"):
        flag = "--" + name.replace("_", "-")
        raise pytest.UsageError(f"{flag}: expected true or false, got {text!r}")
    return text == "true"


def _size(config: pytest.Config, name: str) -> int:
    from pytest_llmtool.sandbox.limits import parse_value

    text = _raw(config, name)[0].strip()
    try:
        return parse_value("fsize", text)  # a size, as --llm-limits reads one
    except ValueError:
        flag = "--" + name.replace("_", "-")
        raise pytest.UsageError(f"{flag}: expected a size such as 16MiB, got {text!r}") from None


def _limits(config: pytest.Config) -> dict[str, int]:
    from pytest_llmtool.sandbox.limits import parse_limits

    try:
        return parse_limits(_raw(config, "llm_limits")[0])
    except ValueError as exc:
        raise pytest.UsageError(f"--llm-limits: {exc}") from None


def _tool_modes(config: pytest.Config) -> tuple[ToolMode, ...]:
    from pytest_llmtool.records import TOOL_MODES

    names = _split(_raw(config, "llm_tool_mode")[0])
    unknown = [n for n in names if n not in TOOL_MODES]
    if not names or unknown:
        got = f"got {unknown[0]!r}" if unknown else "got none"
        raise pytest.UsageError(
            f"--llm-tool-mode: expected scripted, baseline or both (comma-separated), {got}"
        )
    if len(set(names)) != len(names):
        raise pytest.UsageError(f"--llm-tool-mode: a mode is named twice in {names}")
    return tuple(m for m in TOOL_MODES if m in names)


def _harbor_variants(config: pytest.Config, max_bytes: int) -> tuple[HarborVariant, ...]:
    from pytest_llmtool.inputs.harbor_variants import VariantsError, read_variants

    path = _path(config, "llm_harbor_variants")
    if path is None:
        return ()
    try:
        return read_variants(path, max_bytes)
    except VariantsError as exc:
        raise pytest.UsageError(f"--llm-harbor-variants: {exc}") from None


def _reward_threshold(config: pytest.Config) -> float:
    """Any finite number: Harbor's rewards are not bounded (FormulaCode's reach below 0)."""
    text = _raw(config, "llm_reward_threshold")[0].strip()
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise pytest.UsageError(f"--llm-reward-threshold: expected a number, got {text!r}")
    return value


def _bash(config: pytest.Config) -> tuple[str, ...]:
    """--llm-bash: bashkit, container[:IMAGE], or one of each (bashkit first)."""
    names = _split(_raw(config, "llm_bash")[0])
    wrong = [
        n for n in names if n not in ("bashkit", "container") and not n.startswith("container:")
    ]
    wrong += [n for n in names if n == "container:"]
    kinds = [n.partition(":")[0] for n in names]
    if not names or wrong or len(set(kinds)) != len(kinds):
        got = f"got {wrong[0]!r}" if wrong else f"got {','.join(names) or 'none'}"
        raise pytest.UsageError(
            "--llm-bash: expected bashkit, container, container:IMAGE, or bashkit and one "
            f"container (comma-separated), {got}"
        )
    return tuple(sorted(names, key=lambda n: n != "bashkit"))


def _gaps_from(config: pytest.Config, gaps: Path | None) -> tuple[Path, ...]:
    """--llm-gaps-from: recorded runs, relative like every path option; needs --llm-gaps."""
    text, from_cli = _raw(config, "llm_gaps_from")
    base = config.invocation_params.dir if from_cli else config.rootpath
    paths = tuple(base / part for part in _split(text))
    if paths and gaps is None:
        raise pytest.UsageError("--llm-gaps-from needs --llm-gaps=DIR (where the report goes)")
    return paths


def _inspect_log(config: pytest.Config) -> Path | None:
    """--llm-inspect-log: refused at once where inspect_ai is missing (found, not imported:
    the plugin pays nothing for it until the writer runs). Workers never write it."""
    path = _path(config, "llm_inspect_log")
    worker = hasattr(config, "workerinput")
    if path is not None and not worker and importlib.util.find_spec("inspect_ai") is None:
        raise pytest.UsageError(
            "--llm-inspect-log needs inspect-ai, which is not installed: "
            "pip install 'pytest-llmtool[inspect]'"
        )
    return path


def _resume(config: pytest.Config) -> Path | bool:
    text = _raw(config, "llm_resume")[0].strip()
    if text.lower() in ("", "false"):
        return False
    if text.lower() == "true":
        return True
    return _path(config, "llm_resume") or False


def _params_default() -> ModelParams:
    from pytest_llmtool.records import ModelParams

    return ModelParams()


def _retry_policy(**limits: Any) -> RetryPolicy:
    from pytest_llmtool.agents.retry import RetryPolicy

    return RetryPolicy(**limits)


def _table(config: pytest.Config) -> dict[str, ModelEntry]:
    """The model table: `[tool.llmtool.models.NAME]` in the rootdir's pyproject.toml (and in
    the ini file, when that is another pyproject.toml), and `[models.NAME]` in --llm-models."""
    from pytest_llmtool.agents.models import TableError, read_tables

    pyprojects = [config.rootpath / "pyproject.toml"]
    if config.inipath is not None and config.inipath.name == "pyproject.toml":
        pyprojects.append(config.inipath)
    models_file = _path(config, "llm_models")
    here = config.invocation_params.dir
    shown = {}
    for path in [*pyprojects, *([models_file] if models_file else [])]:
        resolved = path.resolve()
        shown[resolved] = shown[path] = (
            os.path.relpath(resolved, here) if resolved.is_relative_to(here) else str(resolved)
        )
    try:
        return read_tables(pyprojects, models_file, shown)
    except TableError as exc:
        raise pytest.UsageError(str(exc)) from None


def _agents(config: pytest.Config, agent_cmd: str | None) -> tuple[str, ...]:
    """--llm-agent's names as given (none when it is not set), each known (else a usage
    error with a "did you mean"), and none with --llm-agent-cmd, an agent of its own."""
    import difflib

    from pytest_llmtool.agents.installed import AGENT_NAMES, BUILTIN

    opt = next(o for o in OPTIONS if o.name == "llm_agent")
    names = _split(raw_option(config, opt) or "")
    for name in names:
        if name not in AGENT_NAMES:
            close = difflib.get_close_matches(name, AGENT_NAMES, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise pytest.UsageError(
                f"--llm-agent: unknown agent {name!r} (one of {', '.join(AGENT_NAMES)}){hint}"
            )
    if len(set(names)) != len(names):
        raise pytest.UsageError(f"--llm-agent: an agent is named twice in {names}")
    if agent_cmd and names not in ([], [BUILTIN]):
        raise pytest.UsageError(
            "--llm-agent and --llm-agent-cmd cannot be used together: --llm-agent-cmd is the agent"
        )
    return tuple(names)


def _agent_runs(
    config: pytest.Config, refs: tuple[ModelRef, ...], agents: tuple[str, ...]
) -> tuple[ModelRef, ...]:
    """The run's models under their agents (`registry.agent_runs`): each pair left out is a
    warning naming it; every agent CLI used must be installed (else a usage error saying
    how to install it)."""
    from pytest_llmtool.agents.installed import installed
    from pytest_llmtool.agents.installed.runner import AgentCliError, find
    from pytest_llmtool.agents.registry import agent_runs

    try:
        runs = agent_runs(refs, agents)
    except ValueError as exc:
        raise pytest.UsageError(f"--llm-agent: {exc}") from None
    if runs.left_out and not hasattr(config, "workerinput"):
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(
                "--llm-agent: left out (the agent cannot speak the model's protocol): "
                + "; ".join(runs.left_out)
            ),
            stacklevel=2,
        )
    for agent in dict.fromkeys(r.agent for r in runs.refs if r.agent is not None):
        cli = installed(agent)
        try:
            find(cli, os.environ.get("PATH", ""))
        except AgentCliError as exc:
            raise pytest.UsageError(f"--llm-agent: {exc}") from None
        for ref in runs.refs:
            entry = ref.setup
            if ref.agent == agent and entry.client is not None:
                raise pytest.UsageError(
                    f"--llm-agent: {ref.name}: {agent} cannot use client = {entry.client!r} "
                    "(it is told a base URL and a key)"
                )
    return runs.refs


def _check_entry(flag: str, ref: ModelRef, params: ModelParams, base_urls: dict[str, str]) -> None:
    """A model the run will call, with the command line over its entry: a header variable
    unset, a client's missing extra or parameters its protocol refuses is a usage error."""
    from pytest_llmtool.agents.models import problems
    from pytest_llmtool.agents.registry import PROVIDERS, overridden

    if ref.provider not in PROVIDERS:
        return
    entry = overridden(ref, params, base_urls).setup
    found = problems(ref.name, entry, os.environ, sends_params=ref.agent is None)
    if found:
        raise pytest.UsageError(f"{flag}={ref.name}: {found[0]}")


def _params(config: pytest.Config) -> ModelParams:
    """--llm-temperature (0 to 2, what every provider accepts) and --llm-max-tokens (>= 1),
    over every model table entry's own; unset, the entry's (else the provider's default)
    applies."""
    from pytest_llmtool.records import ModelParams

    temperature = max_tokens = None
    if _raw(config, "llm_temperature")[0].strip():
        temperature = _number(config, "llm_temperature", float, 0)
        if temperature > 2:
            got = _raw(config, "llm_temperature")[0].strip()
            raise pytest.UsageError(f"--llm-temperature: expected 0 to 2, got {got!r}")
    if _raw(config, "llm_max_tokens")[0].strip():
        max_tokens = _number(config, "llm_max_tokens", int, 1)
    return ModelParams(temperature=temperature, max_tokens=max_tokens)


@dataclass(frozen=True)
class Settings:
    models: tuple[ModelRef, ...]
    max_turns: int
    report_dir: Path | None
    dataset_patterns: tuple[str, ...]
    concurrency: int = 1
    # --llm-adaptive: per-provider windows learned from rate-limit headers and 429s.
    adaptive: bool = True
    trials: int = 1
    # --llm-task-pass: the passes a task needs of its trials (`stats/task_rule.py`).
    task_rule: TaskRule | None = None
    # --llm-early-stop: what may stop trials early ("tasks", "compare"; empty: off).
    early_stop: tuple[str, ...] = ()
    # --llm-judge-when: "always" or "undecided".
    judge_when: Literal["always", "undecided"] = "always"
    max_cost: float | None = None
    record_dir: Path | None = None
    replay_dir: Path | None = None
    base_urls: dict[str, str] = field(default_factory=dict)
    prompt_cache: bool = True
    retry: RetryPolicy = field(default_factory=_retry_policy)
    prices: dict[str, Price] = field(default_factory=dict)
    # The names --llm-model resolves: aliases (`provider:model-id`) and model table entries.
    aliases: Mapping[str, str | ModelEntry] = field(default_factory=dict)
    judge_model: str | None = None
    # --llm-judge-model with several names: the scenario judge panel (`judge_model` is the
    # first); --llm-judge-samples; --llm-judge-labels and its --llm-judge-min-agreement.
    judge_models: tuple[str, ...] = ()
    judge_samples: int = 1
    judge_labels: Path | None = None
    judge_min_agreement: str = ""
    # --llm-agent: the agents that drive the models (`agents.installed.AGENT_NAMES`).
    agents: tuple[str, ...] = ("builtin",)
    agent_cmd: str | None = None
    agent_env: tuple[str, ...] = ()
    scenario_patterns: tuple[str, ...] = ()
    # --llm-scenario-rules: the rules of a scenario whose file names none.
    scenario_rules: Literal["ax-eval", "seed"] = "ax-eval"
    # --llm-max-line-bytes, --llm-max-yaml-bytes: what one dataset line or task file may hold.
    max_line_bytes: int = 16 << 20
    max_yaml_bytes: int = 4 << 20
    # --llm-explain-collect: what was collected and why, nothing run.
    explain_collect: bool = False
    sandbox: str = "bwrap"
    # --llm-limits: the limits it names, over the defaults and a task's own `limits:`.
    limits: dict[str, int] = field(default_factory=dict)
    history: Path | None = None
    baseline: str | Path | None = None
    fail_on_regression: bool = False
    allow_missing_baseline: bool = False
    allow_model_change: bool = False
    # --llm-fail-under: absolute thresholds, as written (parsed by `gate.thresholds`).
    fail_under: tuple[str, ...] = ()
    # --llm-resume: False, True (the journal this run would write) or a report directory.
    resume: Path | bool = False
    # --llm-gaps: where the gap report goes; --llm-gaps-from: recorded runs to replay.
    gaps: Path | None = None
    solutions: Path | None = None
    gaps_from: tuple[Path, ...] = ()
    # --llm-tool-mode: the modes scripting-tool tasks run in, each its own item.
    tool_modes: tuple[ToolMode, ...] = ("scripted",)
    # --llm-bash: where bash tasks run, each its own item: "bashkit", "container" or
    # "container:IMAGE".
    bash: tuple[str, ...] = ("bashkit",)
    # --llm-harbor-variants: the agent variants each Harbor task runs under (none: one run).
    harbor_variants: tuple[HarborVariant, ...] = ()
    # --llm-reward-threshold: the reward a Harbor item must reach (a task's own wins);
    # --llm-harbor-jobs: where Harbor-shaped result.json files go.
    reward_threshold: float = 1.0
    harbor_jobs: Path | None = None
    # --llm-inspect-log: where the run goes as Inspect AI logs.
    inspect_log: Path | None = None
    # --llm-trajectories: where each item's trajectory goes as ATIF.
    trajectories: Path | None = None
    # --llm-summary: the terminal summary in one screen (short) or with every table (full).
    summary: Literal["short", "full"] = "short"
    # --llm-temperature, --llm-max-tokens: sent with every provider call.
    params: ModelParams = field(default_factory=_params_default)

    @classmethod
    def from_config(cls, config: pytest.Config) -> Settings:
        # Here, not at the top: the options are declared in every pytest run, and these
        # imports are what a run that uses the plugin pays for.
        from pytest_llmtool.agents.base import UnknownModel
        from pytest_llmtool.agents.pricing import DEFAULT_PRICES, parse_prices
        from pytest_llmtool.agents.registry import ModelRef, parse_aliases, resolve
        from pytest_llmtool.sandbox.isolated import SANDBOX_MODES, UnisolatedWarning

        names = _split(_raw(config, "llm_model")[0])
        if not names:
            raise pytest.UsageError("--llm-model: name at least one model")
        if len(set(names)) != len(names):
            raise pytest.UsageError(f"--llm-model: a model is named twice in {names}")
        agent_cmd = _raw(config, "llm_agent_cmd")[0].strip() or None
        try:
            aliases: dict[str, str | ModelEntry] = {
                **parse_aliases(config.getini("llm_model_aliases")),
                **_table(config),
            }
            # An external agent takes the model names as they are; it resolves them itself.
            models = tuple(
                ModelRef(name, "external", name) if agent_cmd else resolve(name, aliases)
                for name in names
            )
        except (UnknownModel, ValueError) as exc:
            raise pytest.UsageError(f"--llm-model: {exc}") from None
        agents = _agents(config, agent_cmd)
        if agent_cmd is None:
            models = _agent_runs(config, models, agents)
        try:
            prices = {**DEFAULT_PRICES, **parse_prices(config.getini("llm_prices"))}
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        if agent_cmd:
            try:
                agent_cmd.format(prompt="", model="", workdir="", trajectory="")
            except (KeyError, IndexError, ValueError) as exc:
                raise pytest.UsageError(
                    "--llm-agent-cmd: only {prompt}, {model}, {workdir} and {trajectory} may "
                    f"be used (problem: {exc!r})"
                ) from None
        judge_models = tuple(
            _split(
                _raw(config, "llm_judge_model")[0].strip()
                or os.environ.get("LLMTOOL_JUDGE_MODEL", "")
            )
        )
        if len(set(judge_models)) != len(judge_models):
            raise pytest.UsageError(f"--llm-judge-model: a model is named twice in {judge_models}")
        judge_refs = []
        for judge_model in judge_models:
            try:
                judge_ref = resolve(judge_model, aliases)
            except UnknownModel as exc:
                raise pytest.UsageError(f"--llm-judge-model: {exc}") from None
            if judge_ref.provider == "offline":
                raise pytest.UsageError("--llm-judge-model: a judge must be a real model")
            judge_refs.append(judge_ref)

        params, base_urls = _params(config), _base_urls(_raw(config, "llm_base_url")[0])
        record_dir, replay_dir = _path(config, "llm_record"), _path(config, "llm_replay")
        if record_dir and replay_dir:
            raise pytest.UsageError("--llm-record and --llm-replay cannot be used together")
        driven = [ref.name for ref in models if ref.agent is not None]
        if driven and replay_dir is not None:
            raise pytest.UsageError(
                f"--llm-replay answers the built-in loop's calls; {driven[0]} is an agent "
                "CLI's, which makes its own"
            )
        if replay_dir is None:
            named = [("--llm-model", ref) for ref in models]
            named += [("--llm-judge-model", ref) for ref in judge_refs]
            for flag, ref in named:
                if ref.key_env and not os.environ.get(ref.key_env):
                    raise pytest.UsageError(
                        f"{flag}={ref.name} needs {ref.key_env} in the environment "
                        "(or --llm-replay=DIR to answer from recordings)"
                    )
                _check_entry(flag, ref, params, base_urls)
        elif not replay_dir.is_dir():
            raise pytest.UsageError(f"--llm-replay: {replay_dir} is not a directory")

        summary = _raw(config, "llm_summary")[0].strip().lower()
        if summary not in ("short", "full"):
            raise pytest.UsageError(f"--llm-summary: expected short or full, got {summary!r}")
        rules = _raw(config, "llm_scenario_rules")[0].strip().lower()
        if rules not in ("ax-eval", "seed"):
            raise pytest.UsageError(
                f"--llm-scenario-rules: expected ax-eval or seed, got {rules!r}"
            )
        max_cost_text = _raw(config, "llm_max_cost")[0].strip()
        sandbox = _raw(config, "llm_sandbox")[0].strip().lower()
        if sandbox not in SANDBOX_MODES:
            raise pytest.UsageError(
                f"--llm-sandbox: expected {' or '.join(SANDBOX_MODES)}, got {sandbox!r}"
            )
        if sandbox == "none" and not hasattr(config, "workerinput"):
            config.issue_config_time_warning(
                UnisolatedWarning(
                    "--llm-sandbox=none: scenario commands are NOT isolated; they run as your "
                    "own processes and can read your files and environment and reach the network"
                ),
                stacklevel=2,
            )
        trials = _number(config, "llm_trials", int, 1)
        return cls(
            models=models,
            max_turns=_number(config, "llm_max_turns", int, 1),
            report_dir=_path(config, "llm_report"),
            dataset_patterns=tuple(_split(_raw(config, "llm_datasets")[0])),
            concurrency=_number(config, "llm_concurrency", int, 1),
            adaptive=_flag(config, "llm_adaptive"),
            trials=trials,
            task_rule=_task_rule(config, trials),
            early_stop=_early_stop(config),
            judge_when=_judge_when(config),
            max_cost=_number(config, "llm_max_cost", float, 0) if max_cost_text else None,
            record_dir=record_dir,
            replay_dir=replay_dir,
            base_urls=base_urls,
            prompt_cache=_flag(config, "llm_prompt_cache"),
            retry=_retry_policy(
                max_attempts=_number(config, "llm_retries", int, 1),
                max_seconds=_number(config, "llm_retry_seconds", float, 0),
                backoff=_number(config, "llm_retry_backoff", float, 0),
                call_timeout=_number(config, "llm_call_timeout", float, 0.001),
            ),
            prices=prices,
            aliases=aliases,
            judge_model=judge_models[0] if judge_models else None,
            judge_models=judge_models,
            judge_samples=_number(config, "llm_judge_samples", int, 1),
            judge_labels=_path(config, "llm_judge_labels"),
            judge_min_agreement=_raw(config, "llm_judge_min_agreement")[0].strip(),
            agents=agents or ("builtin",),
            agent_cmd=agent_cmd,
            agent_env=tuple(_split(_raw(config, "llm_agent_env")[0])),
            scenario_patterns=tuple(_split(_raw(config, "llm_scenarios")[0])),
            scenario_rules="seed" if rules == "seed" else "ax-eval",
            max_line_bytes=_size(config, "llm_max_line_bytes"),
            max_yaml_bytes=_size(config, "llm_max_yaml_bytes"),
            explain_collect=_flag(config, "llm_explain_collect"),
            sandbox=sandbox,
            limits=_limits(config),
            history=_history(config),
            baseline=_baseline(config),
            fail_on_regression=_flag(config, "llm_fail_on_regression"),
            allow_missing_baseline=_flag(config, "llm_allow_missing_baseline"),
            allow_model_change=_flag(config, "llm_allow_model_change"),
            fail_under=tuple(_raw(config, "llm_fail_under")[0].split()),
            resume=_resume(config),
            gaps=_path(config, "llm_gaps"),
            solutions=_path(config, "llm_solutions"),
            gaps_from=_gaps_from(config, _path(config, "llm_gaps")),
            tool_modes=_tool_modes(config),
            bash=_bash(config),
            harbor_variants=_harbor_variants(config, _size(config, "llm_max_yaml_bytes")),
            reward_threshold=_reward_threshold(config),
            harbor_jobs=_path(config, "llm_harbor_jobs"),
            inspect_log=_inspect_log(config),
            trajectories=_path(config, "llm_trajectories"),
            summary="full" if summary == "full" else "short",
            params=params,
        )


def _task_rule(config: pytest.Config, trials: int) -> TaskRule | None:
    """The per-task rule; None with a single trial (a task's verdict is its item's then)."""
    from pytest_llmtool.stats.task_rule import TaskRule

    text = _raw(config, "llm_task_pass")[0]
    if trials == 1:
        if text.strip():
            raise pytest.UsageError("--llm-task-pass needs --llm-trials above 1")
        return None
    try:
        return TaskRule.parse(text, trials)
    except ValueError as exc:
        raise pytest.UsageError(f"--llm-task-pass: {exc}") from None


EARLY_STOP = ("tasks", "compare")


def _early_stop(config: pytest.Config) -> tuple[str, ...]:
    text = _raw(config, "llm_early_stop")[0].strip().lower()
    if text in ("", "off", "false", "no"):
        return ()
    words = tuple(dict.fromkeys(w.strip() for w in text.split(",")))
    if text in ("on", "true", "yes"):
        words = EARLY_STOP
    wrong = [w for w in words if w not in EARLY_STOP]
    if wrong:
        raise pytest.UsageError(
            f"--llm-early-stop: expected tasks, compare, both comma-separated, or off; "
            f"got {', '.join(map(repr, wrong))}"
        )
    return words


def _judge_when(config: pytest.Config) -> Literal["always", "undecided"]:
    text = _raw(config, "llm_judge_when")[0].strip().lower()
    if text not in ("always", "undecided"):
        raise pytest.UsageError(f"--llm-judge-when: expected always or undecided, got {text!r}")
    return "undecided" if text == "undecided" else "always"
