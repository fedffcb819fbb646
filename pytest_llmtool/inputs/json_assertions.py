"""The assertion forms of a JSONPath check (`command_json_path`, `mcp_tool_json_path`, a
trajectory's `args`): `exists`, `equals <value>`, `contains <substring>`, `len >= N`,
`len == N`, `len > N`, applied to the first value a path selects.

Shared by the scenario gates and the trajectory assertions, so a form means the same in
both."""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from jsonpath_ng.exceptions import JSONPathError
from jsonpath_ng.ext.parser import parse as parse_jsonpath

_EXCERPT = 200  # characters of a value quoted in a failure message
_ASSERTION_FORMS = "exists, equals <value>, contains <substring>, len >= N, len == N, len > N"
_LEN = re.compile(r"len\s*(>=|==|>)\s*(\d+)")
_KEYWORD = re.compile(r"(equals|contains)(?:\s+(.*))?", re.DOTALL)
_LEN_OPS: dict[str, Callable[[int, int], bool]] = {
    ">=": operator.ge,
    "==": operator.eq,
    ">": operator.gt,
}


def first_match(path: str, data: Any) -> tuple[bool, Any]:
    """Whether `path` selects anything in `data`, and the first value it selects."""
    matches = parse_jsonpath(path).find(data)
    return (True, matches[0].value) if matches else (False, None)


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass(frozen=True)
class Assertion:
    """A parsed `command_json_path` assertion.

    `operand` is the text after `equals`/`contains`, or the operator of a `len` form, whose
    bound is `bound`.
    """

    kind: Literal["exists", "equals", "contains", "len"]
    operand: str = ""
    bound: int = 0

    def check(self, found: bool, value: Any) -> tuple[bool, str]:
        """Apply the assertion to the value at the path (`found` False: it matched nothing)."""
        if not found:
            return False, "path matched nothing"
        if self.kind == "exists":
            return (False, "value is null") if value is None else (True, "exists")
        if self.kind == "equals":
            return self._equals(value)
        if self.kind == "contains":
            return self._contains(value)
        return self._len(value)

    def _equals(self, value: Any) -> tuple[bool, str]:
        expected = _json_or_text(self.operand)
        if _same(value, expected):
            return True, f"equals {_show(expected)}"
        return False, f"expected {_show(expected)}, got {_show(value)}"

    def _contains(self, value: Any) -> tuple[bool, str]:
        """A string contains the operand as a substring; an array contains an element equal
        to it, read as JSON when it parses (`contains 2`) or as text (`contains x`)."""
        if isinstance(value, str):
            hit = self.operand in value
        elif isinstance(value, list):
            wanted = _json_or_text(self.operand)
            hit = any(_same(item, wanted) or item == self.operand for item in value)
        else:
            return (
                False,
                f"contains needs a string or array, got {_json_type(value)} {_show(value)}",
            )
        if hit:
            return True, f"contains {self.operand!r}"
        return False, f"{_show(value)} does not contain {self.operand!r}"

    def _len(self, value: Any) -> tuple[bool, str]:
        if not isinstance(value, list | dict | str):
            return False, f"len needs an array, object or string, got {_json_type(value)}"
        size = len(value)
        if _LEN_OPS[self.operand](size, self.bound):
            return True, f"len {size} {self.operand} {self.bound}"
        return False, f"len is {size}, expected {self.operand} {self.bound}"


def parse_assertion(text: str) -> Assertion:
    """Parse a `command_json_path` assertion; raise ValueError listing the forms there are."""
    stripped = text.strip()
    if stripped == "exists":
        return Assertion("exists")
    if keyword := _KEYWORD.fullmatch(stripped):
        kind: Literal["equals", "contains"] = (
            "equals" if keyword.group(1) == "equals" else "contains"
        )
        operand = (keyword.group(2) or "").strip()
        if not operand:
            hint = "equals <value>" if kind == "equals" else "contains <substring>"
            raise ValueError(f"assertion {text!r} needs an operand: {hint}")
        return Assertion(kind, operand)
    if length := _LEN.fullmatch(stripped):
        return Assertion("len", length.group(1), int(length.group(2)))
    raise ValueError(f"unknown assertion {text!r}; the forms are: {_ASSERTION_FORMS}")


def check_json_path(path: str) -> None:
    """Raise ValueError if jsonpath-ng cannot parse `path`, so a scenario fails at load time."""
    try:
        parse_jsonpath(path)
    except JSONPathError as exc:
        raise ValueError(f"JSONPath {path!r} does not parse: {exc}") from None


def _json_or_text(operand: str) -> Any:
    """An assertion operand as JSON when it parses (`3`, `true`, `"x"`), else as plain text."""
    try:
        return json.loads(operand)
    except json.JSONDecodeError:
        return operand


def _same(a: Any, b: Any) -> bool:
    """JSON equality: unlike Python's, `true` is not `1` (at any depth)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _show(value: Any) -> str:
    return _shorten(json.dumps(value, ensure_ascii=False), _EXCERPT)
