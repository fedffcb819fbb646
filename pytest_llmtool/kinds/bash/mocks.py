"""Scripting-tool tasks' mock tools: their definition in a dataset line, and how they answer.

bashkit-eval's scripting-tool tasks (`tools`) give each mock tool a name, a description, a
JSON schema of its parameters, tags and a category (for `discover`), and a `mock`: a fixed
answer, or `{param, responses, default}`, the answer chosen by one parameter's value.

Inside the bash sandbox (scripted mode) the tools are commands, as bashkit's
`ToolDefExtension` makes them: `name --key value` or `--key=value` flags are parsed into
parameters typed by the schema (`parse_flags`), checked against it (`schema_problem`), and
answered; `help` and `discover` describe the tools, and every tool, `help` and `discover`
command is traced by kind. This is a port of bashkit's Rust code (the Python package's
`ScriptedTool` takes no tags or categories and reports no trace), with its messages and exit
codes: 2 for a flag or schema error, 1 for a tool without an answer.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from bashkit import Bash, BuiltinContext, BuiltinResult
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pytest_llmtool.agents.base import ToolStep

# A mock tool is a bash command and a model tool: a name both accept.
TOOL_NAME = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
# The commands every scripted sandbox adds beside the mock tools.
BUILTIN_NAMES = frozenset({"help", "discover"})
# bashkit's limits: traced commands kept per execution, bytes of each traced argument, bytes
# of flag values parsed per command, items of one array flag.
MAX_TRACED = 256
MAX_TRACED_ARG = 1024
MAX_FLAG_BYTES = 64 * 1024
MAX_ARRAY_ITEMS = 4096
MAX_REF_DEPTH = 16
# Work allowed to resolve the types of one schema (at load) or of one command's flags: a
# schema whose `$ref`s and `anyOf`s multiply past it is refused when its line is loaded.
MAX_SCHEMA_STEPS = 10_000

InnerKind = Literal["tool", "help", "discover"]
Traced = tuple[str, InnerKind, list[str], int]


@functools.cache
def shell_names() -> frozenset[str]:
    """The builtins, keywords and commands of bashkit's shell (its `compgen -c`), read from
    bashkit once per process so that the list follows the installed version."""
    listed = Bash().execute_sync("compgen -c").stdout.split()
    return frozenset(listed) - BUILTIN_NAMES


class MockByParam(BaseModel):
    """Answer by one parameter's value (as a string; JSON text for other values); `default`
    for any other value, else the call fails."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    param: str = Field(min_length=1)
    responses: dict[str, str]
    default: str | None = None

    def key(self, params: Mapping[str, Any]) -> str:
        """The response key of a call: the parameter's string, other values as JSON text,
        empty when the parameter is missing (bashkit-eval's lookup)."""
        if self.param not in params:
            return ""
        value = params[self.param]
        return value if isinstance(value, str) else _json(value)


class MockTool(BaseModel):
    """One `tools` entry of a dataset line."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=TOOL_NAME)
    description: str
    input_schema: dict[str, Any] = Field(default_factory=dict, alias="schema")
    tags: list[str] = Field(default_factory=list)
    category: str | None = None
    mock: str | MockByParam

    @field_validator("name")
    @classmethod
    def _not_a_builtin(cls, value: str) -> str:
        if value in BUILTIN_NAMES:
            raise ValueError(f"{value!r} is the name of a command the sandbox adds")
        if value in shell_names():
            raise ValueError(
                f"{value!r} is the name of a shell builtin or of a command the sandbox has; "
                "a tool of that name would silently shadow it"
            )
        return value

    @field_validator("input_schema")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        kind = value.get("type", "object")
        if kind != "object":
            raise ValueError(f"must describe an object (type: object), not type {kind!r}")
        if not isinstance(value.get("properties", {}), dict):
            raise ValueError("properties must be an object")
        check_schema(value)
        return value

    @model_validator(mode="after")
    def _param_in_schema(self) -> MockTool:
        """A mock answering by a parameter the schema does not allow can never answer: every
        call would fail, and the model be blamed. (A schema naming no properties and not
        closing them takes any flag.)"""
        mock = self.mock
        props = self.input_schema.get("properties") or {}
        closed = bool(props) or self.input_schema.get("additionalProperties") is False
        if isinstance(mock, MockByParam) and closed and mock.param not in props:
            known = ", ".join(sorted(props)) or "none"
            raise ValueError(
                f"mock.param {mock.param!r} is not a property of the schema (properties: {known})"
            )
        return self

    def answer(self, params: Mapping[str, Any]) -> str | None:
        """The mock's answer to a call with `params`; None when it has none."""
        mock = self.mock
        if isinstance(mock, str):
            return mock
        return mock.responses.get(mock.key(params), mock.default)

    def usage(self) -> str | None:
        return usage_from_schema(self.input_schema)


class ToolSolution(BaseModel):
    """A scripting-tool task's reference solution, one list of steps per mode: `scripted`
    steps are scripts (each the `commands` of one call of the script tool), `baseline` steps
    mock tool calls (`{"tool": NAME, "input": {...}}`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scripted: list[str] = Field(min_length=1)
    baseline: list[ToolStep] = Field(min_length=1)

    @field_validator("scripted", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value


def _json(value: Any) -> str:
    """A JSON value as serde_json's `to_string` writes it: compact, object keys sorted."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _pretty(value: Any) -> str:
    """serde_json's `to_string_pretty` (two-space indent, keys sorted), with a newline."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# --- flags: `--key value` / `--key=value` -> parameters ------------------------------------


class FlagError(ValueError):
    """Arguments that do not parse as flags; the command exits 2 with the message."""


class SchemaTooComplex(FlagError):
    """A schema whose `$ref`s loop or whose branches multiply past `MAX_SCHEMA_STEPS`."""


class _Walk:
    """One bounded analysis of a schema: its root (for `$ref`) and the steps left."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.left = MAX_SCHEMA_STEPS

    def step(self, cost: int = 1) -> None:
        self.left -= cost
        if self.left < 0:
            raise SchemaTooComplex(
                f"schema: resolving its types takes more than {MAX_SCHEMA_STEPS} steps "
                "($ref and oneOf/anyOf/allOf nest or repeat too much)"
            )

    def resolve(self, ref: str, path: tuple[str, ...]) -> Any:
        """What `ref` points at; a `$ref` already being resolved is a loop."""
        if ref in path:
            raise SchemaTooComplex(f"schema: $ref {ref[:80]!r} refers back to itself")
        self.step(len(ref) // 16)  # following a long pointer is work too
        return _resolve_ref(ref, self.root)


EffectiveType = Literal["string", "integer", "number", "boolean", "array", "object", "unknown"]
_TYPES: frozenset[str] = frozenset({"string", "integer", "number", "boolean", "array", "object"})
_INTEGER = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)", re.I
)


def _resolve_ref(ref: str, root: Mapping[str, Any]) -> Any:
    if not ref.startswith("#/"):
        return None
    current: Any = root
    for segment in ref[2:].split("/"):
        if not isinstance(current, dict):
            return None
        current = current.get(segment.replace("~1", "/").replace("~0", "~"))
    return current


def effective_type(
    schema: Any, walk: _Walk, depth: int = 0, refs: tuple[str, ...] = ()
) -> EffectiveType:
    """A property's type after `$ref`, `oneOf`/`anyOf`/`allOf`, nullable unions and the
    implicit signals (`items`: array, `properties`: object), as bashkit resolves it; bounded
    by `walk`."""
    walk.step()
    if depth > MAX_REF_DEPTH or not isinstance(schema, dict):
        return "unknown"
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return effective_type(walk.resolve(ref, refs), walk, depth + 1, (*refs, ref))
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind if kind in _TYPES else "unknown"  # type: ignore[return-value]
    if isinstance(kind, list):
        names = [k for k in kind if isinstance(k, str)]
        for name in names:
            if name in ("array", "object"):
                return name  # type: ignore[return-value]
        for name in names:
            if name != "null":
                return name if name in _TYPES else "unknown"  # type: ignore[return-value]
    for key in ("oneOf", "anyOf", "allOf"):
        branches = schema.get(key)
        if isinstance(branches, list):
            found = [effective_type(b, walk, depth + 1, refs) for b in branches]
            for name in found:
                if name in ("array", "object"):
                    return name
            for name in found:
                if name != "unknown":
                    return name
    if "items" in schema:
        return "array"
    if "properties" in schema:
        return "object"
    return "unknown"


def coerce(raw: str, prop: Any, walk: _Walk) -> Any:
    """A flag's text as the type its schema gives; the text itself when it does not parse."""
    kind = effective_type(prop, walk) if prop is not None else "unknown"
    if kind == "integer" and _INTEGER.fullmatch(raw) and -(2**63) <= int(raw) < 2**64:
        return int(raw)
    if kind == "number" and _FLOAT.fullmatch(raw):
        number = float(raw)
        return None if math.isnan(number) or math.isinf(number) else number
    if kind == "boolean":
        return {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(
            raw, raw
        )
    if kind in ("array", "object") and raw.lstrip().startswith(("[", "{")):
        parsed = _aggregate(raw)
        if parsed is not None:
            return parsed
    return raw


def _aggregate(raw: str) -> Any:
    if len(raw) > MAX_FLAG_BYTES:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


class _Budget:
    def __init__(self) -> None:
        self.used = 0

    def add(self, size: int, flag: str) -> None:
        self.used += size
        if self.used > MAX_FLAG_BYTES:
            raise FlagError(f"--{flag}: parsed flag data exceeds {MAX_FLAG_BYTES} bytes")


def _object_properties(
    schema: Any, walk: _Walk, depth: int = 0, refs: tuple[str, ...] = ()
) -> dict[str, Any]:
    walk.step()
    if depth > MAX_REF_DEPTH or not isinstance(schema, dict):
        return {}
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return _object_properties(walk.resolve(ref, refs), walk, depth + 1, (*refs, ref))
    props = schema.get("properties")
    if isinstance(props, dict):
        return props
    merged: dict[str, Any] = {}
    for key in ("oneOf", "anyOf", "allOf"):
        for branch in schema.get(key) or []:
            found = _object_properties(branch, walk, depth + 1, refs)
            walk.step(len(found))  # merging many keys many times is work too
            for name, value in found.items():
                merged.setdefault(name, value)
    return merged


def _pairs(
    args: Sequence[str], i: int, schema: Any, walk: _Walk, flag: str, budget: _Budget
) -> tuple[dict[str, Any], int]:
    """`key=value` tokens up to the next `--flag`, as one object."""
    found: dict[str, Any] = {}
    inner = _object_properties(schema, walk)
    while i < len(args) and not args[i].startswith("--"):
        key, sep, value = args[i].partition("=")
        if not sep:
            raise FlagError(f"--{flag}: expected --flag or key=value, got '{args[i]}'")
        if inner and key not in inner:
            raise FlagError(
                f"--{flag}: unknown key '{key}'; valid keys: {', '.join(sorted(inner))}"
            )
        budget.add(len(key.encode()) + len(value.encode()), flag)
        found[key] = coerce(value, inner.get(key), walk)
        i += 1
    return found, i


def _append(result: dict[str, Any], key: str, items: list[Any]) -> None:
    current = result.get(key)
    existing = current if isinstance(current, list) else []
    if len(existing) + len(items) > MAX_ARRAY_ITEMS:
        raise FlagError(
            f"--{key}: array flag has {len(existing) + len(items)} items; "
            f"maximum is {MAX_ARRAY_ITEMS}"
        )
    result[key] = [*existing, *items]


def parse_flags(args: Sequence[str], schema: Mapping[str, Any]) -> dict[str, Any]:
    """bashkit's `parse_flags`: flags typed by the schema; unknown ones kept as strings, a bare
    flag true. Raises `FlagError` for a positional argument or a malformed aggregate."""
    props = schema.get("properties")
    properties: Mapping[str, Any] = props if isinstance(props, dict) else {}
    result: dict[str, Any] = {}
    budget = _Budget()
    walk = _Walk(schema)
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise FlagError(f"expected --flag, got: {arg}")
        flag = arg[2:]
        if "=" in flag:
            key, raw = flag.split("=", 1)
            budget.add(len(raw.encode()), key)
            result[key] = coerce(raw, properties.get(key), walk)
            i += 1
            continue
        prop = properties.get(flag)
        kind = effective_type(prop, walk) if prop is not None else "unknown"
        i += 1
        if kind == "boolean":
            result[flag] = True
        elif kind == "array":
            i = _array_value(args, i, prop, walk, flag, budget, result)
        elif kind == "object":
            if i >= len(args) or args[i].startswith("--"):
                result[flag] = True
            elif args[i].lstrip().startswith(("{", "[")) or "=" not in args[i]:
                budget.add(len(args[i].encode()), flag)
                result[flag] = coerce(args[i], prop, walk)
                i += 1
            else:
                result[flag], i = _pairs(args, i, prop, walk, flag, budget)
        elif i < len(args) and not args[i].startswith("--"):
            budget.add(len(args[i].encode()), flag)
            result[flag] = coerce(args[i], prop, walk)
            i += 1
        else:
            result[flag] = True
    return result


def _array_value(
    args: Sequence[str],
    i: int,
    prop: Any,
    walk: _Walk,
    flag: str,
    budget: _Budget,
    result: dict[str, Any],
) -> int:
    """Consume an array flag's value: a JSON array, one object (JSON or `key=value` pairs) for
    an array of objects, or comma-separated scalars; repeated flags append."""
    if i >= len(args) or args[i].startswith("--"):
        raise FlagError(f"--{flag}: missing value")
    value = args[i]
    items = prop.get("items") if isinstance(prop, dict) else None
    item_kind = effective_type(items, walk) if items is not None else "unknown"
    if value.lstrip().startswith("["):
        parsed = _aggregate(value)
        if isinstance(parsed, list):
            budget.add(len(value.encode()), flag)
            _append(result, flag, parsed)
        else:
            result[flag] = value  # left for the schema check to refuse
        return i + 1
    if item_kind == "object":
        if value.lstrip().startswith("{"):
            parsed = _aggregate(value)
            if parsed is None:
                result[flag] = value
            else:
                budget.add(len(value.encode()), flag)
                _append(result, flag, [parsed])
            return i + 1
        if "=" in value:
            found, i = _pairs(args, i, items, walk, flag, budget)
            _append(result, flag, [found])
            return i
        raise FlagError(f"--{flag}: expected JSON or key=value pairs, got '{value}'")
    parts = value.split(",")
    budget.add(len(value.encode()), flag)
    _append(result, flag, [coerce(part, items, walk) for part in parts])
    return i + 1


def usage_from_schema(schema: Mapping[str, Any], walk: _Walk | None = None) -> str | None:
    """`--id <integer> --name <string>`, flags in name order (bashkit's JSON maps are
    sorted); None when the schema has no properties."""
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        return None
    walk = _Walk(schema) if walk is None else walk
    flags = []
    for key in sorted(props):
        prop = props[key]
        kind = effective_type(prop, walk)
        if kind == "object":
            hint = "<json|key=value...>"
        elif kind == "array":
            items = prop.get("items") if isinstance(prop, dict) else None
            objects = items is not None and effective_type(items, walk) == "object"
            hint = "<json|key=value...>" if objects else "<json|a,b,c>"
        elif kind == "unknown":
            named = prop.get("type") if isinstance(prop, dict) else None
            hint = f"<{named if isinstance(named, str) else 'value'}>"
        else:
            hint = f"<{kind}>"
        flags.append(f"--{key} {hint}")
    return " ".join(flags)


def check_schema(schema: Mapping[str, Any]) -> None:
    """Resolve, within one bound, every type a command line of this tool can ask for: each
    property's, its items', and those of the keys its objects take. Raises
    `SchemaTooComplex` for a schema that loops or multiplies past the bound."""
    walk = _Walk(schema)
    usage_from_schema(schema, walk)
    props = schema.get("properties")
    for prop in (props if isinstance(props, dict) else {}).values():
        items = prop.get("items") if isinstance(prop, dict) else None
        for part in (prop, items):
            if part is not None:
                effective_type(part, walk)
                for inner in _object_properties(part, walk).values():
                    effective_type(inner, walk)


# --- the schema check bashkit makes before calling a tool -----------------------------------


def _has_type(value: Any, expected: str) -> bool:
    if expected == "object":
        return isinstance(value, dict)
    if expected == "array":
        return isinstance(value, list)
    if expected == "string":
        return isinstance(value, str)
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected == "boolean":
        return isinstance(value, bool)
    if expected == "null":
        return value is None
    return True


def _same(a: Any, b: Any) -> bool:
    """JSON equality: a boolean is not the number 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def schema_problem(value: Any, schema: Any, path: str = "input") -> str | None:
    """What bashkit's `validate_schema` finds wrong with `value`: types, `enum`, `required`,
    `additionalProperties: false`, `oneOf`/`anyOf`/`allOf`, and `properties`/`items` within."""
    if not isinstance(schema, dict) or not schema:
        return None
    expected = schema.get("type")
    types = (
        [expected] if isinstance(expected, str) else expected if isinstance(expected, list) else []
    )
    names = [t for t in types if isinstance(t, str)]
    if names and not any(_has_type(value, t) for t in names):
        return f"{path} must be {' or '.join(names)}"
    for keyword in ("oneOf", "anyOf"):
        branches = schema.get(keyword)
        if isinstance(branches, list) and not any(
            schema_problem(value, b, path) is None for b in branches
        ):
            return f"{path} does not match any {keyword} branch"
    for branch in schema.get("allOf") or []:
        found = schema_problem(value, branch, path)
        if found:
            return found
    allowed = schema.get("enum")
    if isinstance(allowed, list) and not any(_same(value, a) for a in allowed):
        return f"{path} is not an allowed value"
    if isinstance(value, dict):
        for key in schema.get("required") or []:
            if isinstance(key, str) and key not in value:
                return f"required property '{key}' is missing"
        props = schema.get("properties")
        properties = props if isinstance(props, dict) else None
        if schema.get("additionalProperties") is False:
            for key in value:
                if properties is None or key not in properties:
                    return f"unknown property '{key}'"
        for key, child in value.items():
            if properties is not None and key in properties:
                found = schema_problem(child, properties[key], f"{path}.{key}")
                if found:
                    return found
    items = schema.get("items")
    if items is not None and isinstance(value, list):
        for index, child in enumerate(value):
            found = schema_problem(child, items, f"{path}[{index}]")
            if found:
                return found
    return None


# --- the commands ------------------------------------------------------------------------


def _traced_arg(arg: str) -> str:
    """An argument cut to bashkit's 1024 traced bytes, on a character boundary."""
    data = arg.encode()
    return arg if len(data) <= MAX_TRACED_ARG else data[:MAX_TRACED_ARG].decode("utf-8", "ignore")


Builtin = Callable[[BuiltinContext], BuiltinResult]


class ToolCommands:
    """A task's mock tools as bash commands, with `help` and `discover`, and the trace of the
    commands run since the last `take`: what bashkit's `ToolDefExtension` adds to a sandbox."""

    def __init__(self, tools: Sequence[MockTool]) -> None:
        self.tools = list(tools)
        self._by_name = {t.name: t for t in self.tools}
        self._traced: list[Traced] = []

    def builtins(self) -> dict[str, Builtin]:
        commands: dict[str, Builtin] = {tool.name: self._command(tool) for tool in self.tools}
        commands["help"] = lambda ctx: self.help(list(ctx.argv))
        commands["discover"] = lambda ctx: self.discover(list(ctx.argv))
        return commands

    def take(self) -> list[Traced]:
        """The commands traced since the last call, oldest first (bashkit keeps the last 256
        of one execution)."""
        traced, self._traced = self._traced[-MAX_TRACED:], []
        return traced

    def _trace(self, name: str, kind: InnerKind, args: Sequence[str], exit_code: int) -> None:
        self._traced.append((name, kind, [_traced_arg(a) for a in args], exit_code))

    def _command(self, tool: MockTool) -> Builtin:
        return lambda ctx: self.run(tool, list(ctx.argv))

    def run(self, tool: MockTool, args: list[str]) -> BuiltinResult:
        """One command line of a mock tool: `--help`, `--dry-run`, or a call."""
        if "--help" in args:
            text = f"{tool.name} - {tool.description}\n"
            usage = tool.usage()
            if usage:
                text += f"Usage: {tool.name} {usage}\n"
            self._trace(tool.name, "help", args, 0)
            return BuiltinResult(stdout=text)
        if "--dry-run" in args:
            return self._dry_run(tool, args)
        try:
            params = parse_flags(args, tool.input_schema)
        except FlagError as exc:  # not traced: bashkit fails before the registry
            return BuiltinResult(stderr=str(exc), exit_code=2)
        problem = schema_problem(params, tool.input_schema)
        if problem:
            self._trace(tool.name, "tool", args, 2)
            return BuiltinResult(stderr=f"{tool.name}: schema error: {problem}\n", exit_code=2)
        answer = tool.answer(params)
        if answer is None:  # bashkit hides a callback's own error behind this line
            self._trace(tool.name, "tool", args, 1)
            return BuiltinResult(stderr=f"{tool.name}: callback failed\n", exit_code=1)
        self._trace(tool.name, "tool", args, 0)
        return BuiltinResult(stdout=answer)

    def _dry_run(self, tool: MockTool, args: list[str]) -> BuiltinResult:
        rest = [a for a in args if a != "--dry-run"]
        report: dict[str, Any] = {"dry_run": True, "tool": tool.name}
        try:
            report |= {"valid": True, "params": parse_flags(rest, tool.input_schema)}
            result = BuiltinResult(stdout=_json(report) + "\n")
        except FlagError as exc:
            report |= {"valid": False, "error": str(exc)}
            result = BuiltinResult(stderr=_json(report) + "\n", exit_code=1)
        self._trace(tool.name, "tool", args, result.exit_code)
        return result

    def help(self, args: list[str]) -> BuiltinResult:
        """`help` / `help --list`: every tool; `help <tool>`: its usage; `--json`: its schema."""
        if not args or args == ["--list"]:
            result = BuiltinResult(stdout=self._listing(self.tools))
        else:
            name = next((a for a in args if not a.startswith("--")), None)
            tool = self._by_name.get(name) if name is not None else None
            if name is None:
                result = BuiltinResult(stderr="usage: help [--list] [<tool>] [--json]", exit_code=1)
            elif tool is None:
                result = BuiltinResult(stderr=f"help: unknown tool: {name}", exit_code=1)
            elif "--json" in args:
                described = {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.input_schema,
                }
                result = BuiltinResult(stdout=_pretty(described))
            else:
                text = f"{tool.name} - {tool.description}\n"
                usage = tool.usage()
                result = BuiltinResult(
                    stdout=text + (f"Usage: {tool.name} {usage}\n" if usage else "")
                )
        self._trace("help", "help", args, result.exit_code)
        return result

    @staticmethod
    def _listing(tools: Sequence[MockTool]) -> str:
        return "".join(f"{t.name:<20} {t.description}\n" for t in tools)

    def discover(self, args: list[str]) -> BuiltinResult:
        """`discover --categories`, or the tools of `--category C`, `--tag T` or `--search
        WORD` (name or description, any case); `--json` for JSON."""
        if not args:
            result = BuiltinResult(
                stderr="usage: discover --categories | --category <name> | --tag <tag> | "
                "--search <keyword> [--json]",
                exit_code=1,
            )
        elif "--categories" in args:
            counts: dict[str, int] = {}
            for tool in self.tools:
                if tool.category is not None:
                    counts[tool.category] = counts.get(tool.category, 0) + 1
            ordered = sorted(counts.items())
            if "--json" in args:
                text = _pretty([{"category": c, "count": n} for c, n in ordered])
            else:
                text = "".join(f"{c} ({n} {'tool' if n == 1 else 'tools'})\n" for c, n in ordered)
            result = BuiltinResult(stdout=text)
        else:
            found = self._filter(args)
            if "--json" in args:
                entries = []
                for tool in found:
                    entry: dict[str, Any] = {"name": tool.name, "description": tool.description}
                    if tool.tags:
                        entry["tags"] = tool.tags
                    if tool.category is not None:
                        entry["category"] = tool.category
                    entries.append(entry)
                result = BuiltinResult(stdout=_pretty(entries))
            else:
                result = BuiltinResult(stdout=self._listing(found))
        self._trace("discover", "discover", args, result.exit_code)
        return result

    def _filter(self, args: list[str]) -> list[MockTool]:
        def value(flag: str) -> str:
            at = args.index(flag)
            return args[at + 1] if at + 1 < len(args) else ""

        if "--category" in args:
            wanted = value("--category")
            return [t for t in self.tools if t.category == wanted]
        if "--tag" in args:
            tag = value("--tag")
            return [t for t in self.tools if tag in t.tags]
        if "--search" in args:
            word = value("--search").lower()
            return [
                t for t in self.tools if word in t.name.lower() or word in t.description.lower()
            ]
        return list(self.tools)

    def call(self, name: str, params: dict[str, Any]) -> tuple[str, str, int]:
        """A baseline-mode call, as bashkit-eval makes it: the model's input as the parameters
        (no flags, no schema check), and the mock's own error text when it has no answer."""
        tool = self._by_name.get(name)
        answer = None if tool is None else tool.answer(params)
        if tool is None:
            stdout, stderr = "", f"unknown tool: {name}"
        elif answer is None:
            mock = tool.mock
            assert isinstance(mock, MockByParam)  # a fixed answer always answers
            stdout, stderr = "", f"no mock response for {mock.param}={mock.key(params)}"
        else:
            stdout, stderr = answer, ""
        exit_code = 1 if stderr else 0
        self._trace(name, "tool", [], exit_code)
        return stdout, stderr, exit_code
