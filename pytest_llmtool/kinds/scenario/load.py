"""Scenario files: YAML describing a task for a real CLI tool or MCP server, validated against
a JSON Schema.

The schema (`scenario.schema.json`, shipped in the package) is ax-eval's current scenario format
(llm-tool-test's February format is a subset of it) plus our `solution` (reference commands for
the oracle), `guidance` (AGENTS.md versions to compare), `network`, `limits` and `rules`. A
mistake anywhere becomes one `ScenarioProblem` naming the key path, never an exception, so a
bad scenario cannot stop the others from running. Which rules are in force (the file's
`rules:`, else the run's `--llm-scenario-rules`) decides what loads: ax-eval refuses
`composite.gate_weight`, seed 004 takes it.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from pytest_llmtool import records
from pytest_llmtool.agents.base import SolutionStep, ToolStep
from pytest_llmtool.agents.judge import Criterion, Rubric, load_rubric
from pytest_llmtool.inputs.lines import MAX_YAML_BYTES
from pytest_llmtool.inputs.safe_yaml import (
    MAX_PROBLEM,
    Unreadable,
    one_problem,
    read_yaml_file,
    schema_problems,
)
from pytest_llmtool.inputs.untrusted import nonprinting, shorten
from pytest_llmtool.kinds.scenario.gates import Gate
from pytest_llmtool.kinds.scenario.interaction import compile_pattern
from pytest_llmtool.kinds.scenario.mcp_target import (
    HttpTransport,
    McpTarget,
    StdioTransport,
    is_env_name,
    mcp_problems,
)
from pytest_llmtool.report.redact import KEY_ENVS, URL_ENVS
from pytest_llmtool.sandbox.limits import limit_problems, task_limits

# llm-tool-test's old domain gates and the generic gate that replaces each (seed 004's table).
MIGRATIONS = {
    "min_notes": 'command_json_path {command: "my-tool list --format json", path: "$", '
    'assertion: "len >= N"}',
    "min_links": 'command_json_path {command: "my-tool export --format json", path: "$.links", '
    'assertion: "len >= N"}',
    "search_hit": "command_output_contains {command: \"my-tool search '<query>'\", "
    'substring: "<query>"}',
    "note_exists": 'command_succeeds {command: "my-tool show <id>"}',
    "link_exists": 'command_output_contains {command: "my-tool export --format json", '
    'substring: "<link>"}',
    "tag_exists": 'command_output_contains {command: "my-tool list --format json", '
    'substring: "<tag>"}',
    "content_contains": 'command_output_contains {command: "my-tool show <id>", '
    'substring: "<substring>"}',
    "doctor_passes": 'command_succeeds {command: "my-tool doctor"}',
}
# Upstream keys we deliberately do not take, and what to use instead.
UNSUPPORTED = {
    "cost": "use --llm-max-cost",
    "docs": "put documentation in the template folder or use `guidance`",
}
# Upstream keys we accept and do not use, and the note the item carries about each.
IGNORED = {
    "tool_matrix": "tool_matrix is not used: the models are --llm-model's, the agent the "
    "built-in loop or --llm-agent-cmd",
}
TARGET_KINDS = ("cli", "mcp")
# The run's own provider variables: never the agent's, even when `agent_env` names them (a
# scenario file may come from anyone; the keys are the user's).
PROVIDER_VARIABLES = (*KEY_ENVS, *URL_ENVS)
_GATES: TypeAdapter[list[Gate]] = TypeAdapter(list[Gate])


@cache
def schema() -> dict[str, Any]:
    text = (Path(__file__).parent / "scenario.schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


# Which rules score a scenario: ax-eval's current ones (the default), or seed 004's formulas
# (defined with the record, which says which scored each result).
Rules = records.Rules
# ax-eval's `interaction.target_commands`: must the agent use the target, may it, or must it not.
TargetCommands = Literal["required", "optional", "forbidden"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Target(_Model):
    """A CLI target (`kind: cli`, or no `kind`: every scenario written before MCP targets)."""

    kind: Literal["cli"] = "cli"
    binary: str
    command_pattern: str | None = None
    health_check: str | None = None
    env: dict[str, str] = Field(default_factory=dict)


class PostScript(_Model):
    command: str
    timeout_secs: float = 30.0


class Evaluator(_Model):
    """ax-eval's `scripts.evaluators[]`: a script whose JSON gives diagnostic metrics."""

    command: str
    name: str
    timeout_secs: float = 60.0


class JudgeConfig(_Model):
    enabled: bool
    rubric: str | None = None  # ax-eval: inline `criteria`, else the default rubric
    pass_threshold: float = 0.7
    model: str | None = None
    tool: str | None = None  # ax-eval's judge CLI; recorded, the judge models are ours
    criteria: list[Criterion] = Field(default_factory=list)
    prescriptiveness_discount: float = 0.5
    # pytest-llmtool: the judge reads the agent's thinking too; by default it grades what the
    # agent said and did, not what it reasoned.
    include_thinking: bool = False


class Composite(_Model):
    """Weights of the optional composite score; llm-tool-test's defaults fill the gaps."""

    judge_weight: float = 0.55
    gate_weight: float = 0.35  # seed 004 only: ax-eval refuses it
    interaction_weight: float = 0.10


class Scenario(_Model):
    path: Path
    name: str
    description: str
    tags: list[str] = Field(default_factory=list)
    tier: int = 0
    network: bool = False  # pytest-llmtool: the sandbox shares the host's network
    limits: dict[str, int] = Field(default_factory=dict)  # pytest-llmtool: `limits.py`
    template_folder: Path | None = None
    setup_commands: list[str] = Field(default_factory=list)
    target: Target | McpTarget
    prompt: str
    timeout_secs: float = 300.0
    max_turns: int | None = None
    post_scripts: list[PostScript] = Field(default_factory=list)
    evaluators: list[Evaluator] = Field(default_factory=list)
    gates: list[Gate]
    judge: JudgeConfig | None = None
    rubric_path: Path | None = None
    composite: Composite | None = None
    guidance: list[Path] = Field(default_factory=list)
    solution: list[SolutionStep] | None = None
    agent_env: list[str] = Field(default_factory=list)  # parent variables the agent may see
    target_commands: TargetCommands = "required"
    rules: Rules = "ax-eval"  # the rules in force: the file's `rules:`, else llm_scenario_rules
    notes: list[str] = Field(default_factory=list)  # what loading did not use, for the item

    @property
    def id(self) -> str:
        return self.name


@dataclass(frozen=True)
class ScenarioProblem:
    message: str


def _premigration(data: dict[str, Any]) -> list[str]:
    problems = [
        f"{key}: not supported ({hint})" for key, hint in UNSUPPORTED.items() if key in data
    ]
    target = data.get("target")
    kind = target.get("kind", "cli") if isinstance(target, dict) else "cli"
    if kind not in TARGET_KINDS:
        near = difflib.get_close_matches(str(kind), TARGET_KINDS, n=1, cutoff=0.5)
        hint = f"did you mean {near[0]}? " if near else ""
        problems.append(
            f"target.kind: unknown target kind {kind!r}; {hint}"
            f"valid kinds: {', '.join(TARGET_KINDS)}"
        )
    evaluation = data.get("evaluation")
    gates = evaluation.get("gates") if isinstance(evaluation, dict) else None
    for index, gate in enumerate(gates if isinstance(gates, list) else []):
        kind = gate.get("type") if isinstance(gate, dict) else None
        if isinstance(kind, str) and kind in MIGRATIONS:
            problems.append(
                f"evaluation.gates[{index}].type: {kind!r} is an old domain gate; "
                f"use the generic {MIGRATIONS[kind]}"
            )
    return problems


def _semantic_problems(data: dict[str, Any], base: Path, rules: Rules) -> list[str]:
    problems = limit_problems(data.get("limits", {}), "limits")
    problems += _agent_env_problems(data)
    composite = data["evaluation"].get("composite", {})
    if rules == "ax-eval" and "gate_weight" in composite:
        problems.append(
            "evaluation.composite.gate_weight: ax-eval's composite has no gate share (a failed "
            "gate fails the scenario); delete gate_weight, or keep seed 004's composite with "
            "`rules: seed` in this file or llm_scenario_rules = seed"
        )
    target = data["target"]
    if target.get("kind") == "mcp":
        problems += mcp_problems(target, data.get("solution"), data.get("network", False))
        command = target["transport"].get("command", "")
        if "/" in command and not command.startswith("$"):  # `${AX_EVAL_FIXTURE_DIR}/...`: run time
            problems += _binary_problems(base, command, "target.transport.command")
    else:
        try:
            compile_pattern(target.get("command_pattern"), target["binary"])
        except ValueError as exc:
            problems.append(f"target.command_pattern: {exc}")
        if "/" in target["binary"]:
            problems += _binary_problems(base, target["binary"], "target.binary")
    try:
        _GATES.validate_python(data["evaluation"]["gates"])
    except ValidationError as exc:
        # The gate models check their regexes, JSONPaths and assertions themselves.
        for error in exc.errors():
            index, _kind, *field = error["loc"]
            where = "".join(f".{f}" for f in field)  # none: the gate as a whole (trajectory)
            message = error["msg"].removeprefix("Value error, ")
            problems.append(f"evaluation.gates[{index}]{where}: {message}")
    if target.get("kind") != "mcp":
        problems += [
            f"evaluation.gates[{i}]: mcp_tool_json_path needs an MCP target (target.kind: mcp)"
            for i, gate in enumerate(data["evaluation"]["gates"])
            if gate["type"] == "mcp_tool_json_path"
        ]
    problems += _unprintable(data)
    if "template_folder" in data:
        name = data["template_folder"]
        outside = _outside(base, name) or _outside(base, f"templates/{name}")
        if outside:
            problems.append(f"template_folder: {outside}")
        elif _template(base, name) is None:
            problems.append(
                f"template_folder: neither {base / name} nor {base / 'templates' / name} "
                "is a directory"
            )
    labels: dict[str, int] = {}
    for index, doc in enumerate(data.get("guidance", [])):
        outside = _outside(base, doc)
        label = guidance_label(base / doc)
        if outside:
            problems.append(f"guidance[{index}]: {outside}")
        elif not (base / doc).is_file() and not (base / doc).is_dir():
            problems.append(f"guidance[{index}]: {base / doc} is not a file or a directory")
        elif label in labels:
            problems.append(
                f"guidance[{index}]: {doc!r} is named {label!r} in node ids, as "
                f"guidance[{labels[label]}] is; rename one"
            )
        labels.setdefault(label, index)
    judge = data["evaluation"].get("judge")
    if judge and judge["enabled"] and "rubric" in judge:
        outside = _outside(base, judge["rubric"])
        if outside:
            problems.append(f"evaluation.judge.rubric: {outside}")
        else:
            try:
                load_rubric(base / judge["rubric"])
            except (OSError, ValueError) as exc:
                problems.append(f"evaluation.judge.rubric: {exc}")
    if judge and "criteria" in judge:
        try:
            Rubric(criteria=judge["criteria"])
        except ValidationError as exc:
            # The schema checked each criterion; what is left is the rubric's own rules
            # (unique ids, weights summing to 1), whose messages name their key path.
            problems += [
                f"evaluation.judge.{error['msg'].removeprefix('Value error, ')}"
                for error in exc.errors()
            ]
    return problems


def _agent_env_problems(data: dict[str, Any]) -> list[str]:
    """`agent_env` names variables, and never a stdio MCP server's private ones: those reach
    the server alone (ax-eval's rule), and listing one would hand the agent the server's
    credential."""
    target = data["target"]
    private: set[str] = set()
    if target.get("kind") == "mcp" and target["transport"]["type"] == "stdio":
        private = {*target.get("env", {}), *target["transport"].get("env", {})}
    problems = []
    for index, name in enumerate(data.get("agent_env", [])):
        if not is_env_name(name):
            problems.append(
                f"agent_env[{index}]: {shorten(name, 40)!r} is not an environment variable "
                "name (letters, digits and _, not starting with a digit)"
            )
        elif name in private:
            problems.append(
                f"agent_env[{index}]: {name} is the stdio MCP server's private variable "
                "(target.env); the agent may not see it, so that the server's credentials stay "
                "the server's"
            )
    return problems


def guidance_label(path: Path) -> str:
    """A guidance version's name in node ids and reports: a file's stem (`v2.md`: `v2`), a
    directory's name (`with-skills`)."""
    return path.name if path.is_dir() else path.stem


def _unprintable(data: dict[str, Any]) -> list[str]:
    """Names that end up in node ids, markers and tables must not carry terminal controls."""
    named = [("name", data["name"])]
    named += [(f"tags[{i}]", tag) for i, tag in enumerate(data.get("tags", []))]
    named += [(f"guidance[{i}]", doc) for i, doc in enumerate(data.get("guidance", []))]
    return [f"{where}: {problem}" for where, value in named if (problem := nonprinting(value))]


def _template(base: Path, name: str) -> Path | None:
    """The template folder a scenario names: next to it, else in the `templates/` folder
    beside it, where ax-eval's bundled scenarios keep theirs (ax-eval looks in its fixtures'
    `templates/`; ours stays inside the scenario's directory)."""
    for folder in (base / name, base / "templates" / name):
        if folder.is_dir():
            return folder
    return None


def _outside(base: Path, value: str) -> str | None:
    """Why a file the scenario names may not be used: only files under the scenario's own
    directory are copied into the work directory or read, never other files of the host."""
    if Path(value).is_absolute():
        return f"{value!r} is an absolute path; give a path relative to the scenario file"
    try:
        resolved, root = (base / value).resolve(), base.resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        return f"{value!r} cannot be resolved: {exc}"
    if not resolved.is_relative_to(root):
        return f"{value!r} resolves to {resolved}, outside the scenario's directory {root}"
    return None


def _binary_problems(base: Path, binary: str, where: str) -> list[str]:
    """A binary (or MCP server command) given as a path must be an executable file next to
    the scenario."""
    outside = _outside(base, binary)
    if outside:
        return [f"{where}: {outside}"]
    resolved = (base / binary).resolve()
    if not resolved.exists():
        return [f"{where}: {resolved} does not exist"]
    if not resolved.is_file():
        return [f"{where}: {resolved} is not a file"]
    if not os.access(resolved, os.X_OK):
        return [f"{where}: {resolved} is not executable (chmod +x it)"]
    return []


def load_scenario(
    path: Path, max_bytes: int = MAX_YAML_BYTES, rules: Rules = "ax-eval"
) -> Scenario | ScenarioProblem:
    """The scenario in `path`, or its problem; `rules` are the run's (`--llm-scenario-rules`),
    which the file's own `rules:` overrides."""
    data = _document(path, max_bytes)
    if isinstance(data, str):
        return ScenarioProblem(data)
    problems = _premigration(data) or schema_problems(schema(), data)
    rules = data.get("rules", rules)
    if not problems:
        problems = _semantic_problems(data, path.parent, rules)
    if problems:
        return ScenarioProblem(one_problem(problems))
    return _build(data, path, rules)


def format_problem(path: Path, max_bytes: int = MAX_YAML_BYTES) -> str | None:
    """What keeps a YAML file no pattern names from being a scenario by what it holds (one
    document, valid against the schema), or None when it is one: its other problems (bytes
    that are not UTF-8, a missing template, a binary that is not executable) are then its
    item's error."""
    data = _document(path, max_bytes, lenient=True)
    if isinstance(data, str):
        return data
    problems = _premigration(data) or schema_problems(schema(), data)
    return one_problem(problems) if problems else None


def _document(path: Path, max_bytes: int, lenient: bool = False) -> dict[str, Any] | str:
    """The scenario file's mapping, or what is wrong with it."""
    data = read_yaml_file(path, max_bytes, lenient=lenient)
    if isinstance(data, Unreadable):
        return shorten(data.message, MAX_PROBLEM)
    if not isinstance(data, dict):
        return "(top level): a scenario is a mapping of keys"
    return data


def _build(data: dict[str, Any], path: Path, rules: Rules) -> Scenario:
    base = path.parent
    evaluation = data["evaluation"]
    judge = JudgeConfig(**evaluation["judge"]) if "judge" in evaluation else None
    solution = data.get("solution")
    agent_env = data.get("agent_env", [])
    notes = [note for key, note in IGNORED.items() if key in data]
    notes += [
        f"agent_env: {name} is the run's own provider variable; it is never passed to the agent"
        for name in agent_env
        if name in PROVIDER_VARIABLES
    ]
    if judge and judge.rubric and judge.criteria:
        notes.append(
            "evaluation.judge.criteria: not used; the rubric file is, as in ax-eval "
            "(criteria apply only when no rubric is given)"
        )
    return Scenario(
        path=path,
        name=data["name"],
        description=data["description"],
        tags=data.get("tags", []),
        tier=data.get("tier", 0),
        network=data.get("network", False),
        limits=task_limits(data.get("limits", {})),
        template_folder=_template(base, data["template_folder"])
        if "template_folder" in data
        else None,
        setup_commands=data.get("setup", {}).get("commands", []),
        target=_target(data["target"], base),
        prompt=data["task"]["prompt"],
        timeout_secs=data.get("run", {}).get("timeout_secs", 300.0),
        max_turns=data.get("run", {}).get("max_turns"),
        post_scripts=[PostScript(**s) for s in data.get("scripts", {}).get("post", [])],
        evaluators=[Evaluator(**e) for e in data.get("scripts", {}).get("evaluators", [])],
        gates=_GATES.validate_python(evaluation["gates"]),
        judge=judge,
        rubric_path=base / judge.rubric if judge and judge.rubric else None,
        composite=Composite(**evaluation["composite"]) if "composite" in evaluation else None,
        guidance=[base / doc for doc in data.get("guidance", [])],
        solution=_solution(solution),
        agent_env=[name for name in dict.fromkeys(agent_env) if name not in PROVIDER_VARIABLES],
        target_commands=data.get("interaction", {}).get("target_commands", "required"),
        rules=rules,
        notes=notes,
    )


def _target(data: dict[str, Any], base: Path) -> Target | McpTarget:
    if data.get("kind") != "mcp":
        return Target(**data)
    raw = data["transport"]
    transport: StdioTransport | HttpTransport
    if raw["type"] == "stdio":
        command = raw["command"]
        # A command named by a path is taken relative to the scenario file, as a binary is;
        # one under a placeholder (`${AX_EVAL_FIXTURE_DIR}/server`) is expanded when it runs.
        if "/" in command and not command.startswith("$"):
            command = str((base / command).resolve())
        transport = StdioTransport(
            command=command, args=raw.get("args", []), env=raw.get("env", {})
        )
    else:
        transport = HttpTransport(url=raw["url"], headers=raw.get("headers", {}))
    return McpTarget(**{**data, "transport": transport})


def _solution(solution: Any) -> list[SolutionStep] | None:
    """Strings are bash steps; `{tool, input}` mappings are calls of the tool they name."""
    if solution is None:
        return None
    steps = [solution] if isinstance(solution, str) else solution
    return [s if isinstance(s, str) else ToolStep(**s) for s in steps]
