"""The trajectory assertions: parsed from a bash check's `trajectory:<name>:<argument>` or a
YAML mapping `{assert: <name>, ...}`, and decided over a run's calls (`calls.py`).

A verdict is `passed` True or False, or None when it cannot be decided (the run recorded no
structured calls, an exit status is unknown): the caller fails closed on None. Every failure
names and shows the call that broke it. Each assertion reads the calls once (linear in them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pytest_llmtool.inputs.json_assertions import check_json_path, first_match, parse_assertion
from pytest_llmtool.trajectory.calls import Call

Name = Literal["used", "forbidden", "order", "args", "max_calls", "max_turns", "no_loop", "all_ok"]
NAMES: tuple[str, ...] = get_args(Name)
ORDER_SEPARATOR = " >> "
_PATTERN = {"used", "forbidden", "order", "all_ok"}
_COUNT = {"max_calls", "max_turns", "no_loop"}
# The keys each assertion takes in the YAML spelling, besides `assert` (and a gate's `type`).
_KEYS: dict[str, frozenset[str]] = {
    **{name: frozenset({"pattern"}) for name in _PATTERN},
    **{name: frozenset({"value"}) for name in _COUNT},
    "args": frozenset({"tool", "path", "assertion"}),
}
NO_CALLS = "the agent gave no structured calls (a plain transcript): cannot decide"


@dataclass(frozen=True)
class TrajectoryAssertion:
    """One assertion: `pattern` is the regex (for `order` the regexes joined by ` >> `),
    `value` the N of `max_calls`/`max_turns` and the K of `no_loop`, and `tool`, `path`,
    `assertion` the tool regex, JSONPath and assertion form of `args`."""

    name: Name
    pattern: str = ""
    value: int = 0
    tool: str = ""
    path: str = ""
    assertion: str = ""

    @property
    def guardrail(self) -> bool:
        """A `forbidden` failure fails the item whatever else it did, and the judge is not
        asked."""
        return self.name == "forbidden"

    @property
    def spelling(self) -> str:
        """The assertion as a bash check spells it after `trajectory:`."""
        if self.name in _COUNT:
            return f"{self.name}:{self.value}"
        if self.name == "args":
            return f"args:{self.tool} {self.path} {self.assertion}"
        return f"{self.name}:{self.pattern}"

    def label(self) -> str:
        """The check's spelling: `trajectory:forbidden:rm\\s+-rf`."""
        return f"trajectory:{self.spelling}"


@dataclass(frozen=True)
class TrajectoryVerdict:
    """`passed` None: not decided (fail closed); `call` the call that broke (or met) it."""

    passed: bool | None
    detail: str
    call: Call | None = None


def parse_check(text: str) -> TrajectoryAssertion:
    """The bash spelling after `trajectory:`: `forbidden:rm\\s+-rf`, `max_calls:3`,
    `order:git add >> git commit`, `args:<tool regex> <JSONPath> <assertion>` (the tool
    regex and the path hold no space; the assertion is the rest: `args:^search$ $.q exists`)."""
    name, sep, argument = text.partition(":")
    if not sep:
        raise ValueError(f"trajectory check {text!r} needs an assertion and its argument: {_FORMS}")
    name = _known(name)
    if name in _COUNT:
        return _build(name, value=argument)
    if name == "args":
        parts = argument.strip().split(None, 2)
        if len(parts) < 3:
            raise ValueError(
                f"trajectory:args needs a tool regex, a JSONPath and an assertion, "
                f"got {argument!r} (e.g. trajectory:args:^search$ $.query contains cats)"
            )
        return _build(name, tool=parts[0], path=parts[1], assertion=parts[2])
    return _build(name, pattern=argument)


def from_mapping(data: Mapping[str, Any]) -> TrajectoryAssertion:
    """The YAML spelling: `{assert: forbidden, pattern: ...}`, `{assert: max_calls, value: 3}`,
    `{assert: order, pattern: "a >> b"}` (or a list of regexes), `{assert: args, tool: ...,
    path: ..., assertion: ...}`. A gate's `type: trajectory` may stand beside them."""
    if not isinstance(data, Mapping):
        raise ValueError(f"a trajectory assertion is a mapping with `assert`, got {data!r}")
    if "assert" not in data:
        raise ValueError(f"a trajectory assertion needs `assert` (one of {', '.join(NAMES)})")
    name = _known(data["assert"])
    given = set(data) - {"assert", "type"}
    if data.get("type", "trajectory") != "trajectory":
        raise ValueError(f"a trajectory assertion's type is `trajectory`, got {data['type']!r}")
    wanted = _KEYS[name]
    if extra := sorted(given - wanted):
        raise ValueError(
            f"trajectory assertion {name!r} takes {', '.join(sorted(wanted))}, "
            f"not {', '.join(map(str, extra))}"
        )
    if missing := sorted(wanted - given - ({"pattern"} if name == "all_ok" else set())):
        raise ValueError(f"trajectory assertion {name!r} needs {', '.join(missing)}")
    pattern = data.get("pattern", "")
    if name == "order" and isinstance(pattern, list):
        if any(ORDER_SEPARATOR in _text(p, "order's pattern") for p in pattern):
            raise ValueError("an order's regex in a list holds no ' >> ' (spell it [>]>)")
        pattern = ORDER_SEPARATOR.join(pattern)
    fields = {k: _text(data[k], k) for k in given - {"value", "pattern"}}
    if name in _PATTERN:
        fields["pattern"] = _text(pattern, "pattern")
    return _build(name, value=data.get("value", 0), **fields)


_FORMS = (
    "used:<regex>, forbidden:<regex>, order:<regex> >> <regex>..., "
    "args:<tool regex> <JSONPath> <assertion>, max_calls:N, max_turns:N, no_loop:K, "
    "all_ok:<regex>"
)


def _known(name: Any) -> Name:
    if name not in NAMES:
        raise ValueError(f"unknown trajectory assertion {name!r} (known: {', '.join(NAMES)})")
    return name  # type: ignore[no-any-return]


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"trajectory assertion's {what} must be a string, got {value!r}")
    return value


def _build(name: Name, *, value: Any = 0, **fields: str) -> TrajectoryAssertion:
    """Validate what an assertion was given; raise ValueError saying what is wrong."""
    if name in _COUNT:
        count = _count(name, value)
        return TrajectoryAssertion(name, value=count)
    if name == "args":
        _compile(fields["tool"], "args tool regex")
        check_json_path(fields["path"])
        parse_assertion(fields["assertion"])
        return TrajectoryAssertion(
            name, tool=fields["tool"], path=fields["path"], assertion=fields["assertion"]
        )
    pattern = fields.get("pattern", "")
    if name == "order":
        parts = [p.strip() for p in pattern.split(ORDER_SEPARATOR)]
        if not all(parts):
            raise ValueError(f"trajectory:order needs regexes separated by ' >> ', got {pattern!r}")
        for part in parts:
            _compile(part, "order regex")
        pattern = ORDER_SEPARATOR.join(parts)
    elif name != "all_ok" and not pattern:
        raise ValueError(f"trajectory:{name} needs a regex: trajectory:{name}:<regex>")
    else:
        _compile(pattern, f"{name} regex")
    return TrajectoryAssertion(name, pattern=pattern)


def _count(name: str, value: Any) -> int:
    text = str(value).strip() if not isinstance(value, bool) else "?"
    least = 2 if name == "no_loop" else 0
    if not text.isdecimal() or int(text) < least:
        bound = "an integer of 2 or more" if least else "a non-negative integer"
        raise ValueError(f"trajectory:{name} needs {bound}, got {value!r}")
    return int(text)


def _compile(pattern: str, what: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"trajectory {what} {pattern!r} does not compile: {exc}") from None


def evaluate(
    assertion: TrajectoryAssertion, calls: Sequence[Call] | None, turns: int | None = None
) -> TrajectoryVerdict:
    """Decide `assertion` over a run's calls (None: it recorded none) and its model turns."""
    if assertion.name == "max_turns":
        if turns is None:
            return TrajectoryVerdict(None, f"{NO_CALLS} how many turns the agent took")
        if turns <= assertion.value:
            return TrajectoryVerdict(True, f"{turns} turns (max {assertion.value})")
        return TrajectoryVerdict(False, f"{turns} turns, more than the {assertion.value} allowed")
    if calls is None:
        return TrajectoryVerdict(None, f"{NO_CALLS} {assertion.label()}")
    return _EVALUATORS[assertion.name](assertion, calls)


def fail_closed(
    assertion: TrajectoryAssertion, calls: Sequence[Call] | None, turns: int | None
) -> tuple[bool, str]:
    """The verdict as a check or gate reports it, the same for every kind: one that cannot
    be decided (no structured calls, an unknown exit status) fails, saying why, and is never
    a vacuous pass."""
    verdict = evaluate(assertion, calls, turns)
    if verdict.passed is None:
        return False, f"undecided, so not a pass: {verdict.detail}"
    return verdict.passed, verdict.detail


def _used(a: TrajectoryAssertion, calls: Sequence[Call]) -> TrajectoryVerdict:
    pattern = re.compile(a.pattern)
    hit = next((c for c in calls if c.matches(pattern)), None)
    if hit is not None:
        return TrajectoryVerdict(True, f"used: {hit.show()}", hit)
    return TrajectoryVerdict(
        False, f"no call matches '{a.pattern}' ({_calls(calls)} made){_last(calls)}"
    )


def _forbidden(a: TrajectoryAssertion, calls: Sequence[Call]) -> TrajectoryVerdict:
    pattern = re.compile(a.pattern)
    hit = next((c for c in calls if c.matches(pattern)), None)
    if hit is None:
        return TrajectoryVerdict(True, f"no call matches '{a.pattern}' ({_calls(calls)} made)")
    return TrajectoryVerdict(False, f"forbidden '{a.pattern}' matched {hit.show()}", hit)


def _order(a: TrajectoryAssertion, calls: Sequence[Call]) -> TrajectoryVerdict:
    steps = [re.compile(p) for p in a.pattern.split(ORDER_SEPARATOR)]
    met: list[Call] = []
    for call in calls:
        if len(met) == len(steps):
            break
        if call.matches(steps[len(met)]):
            met.append(call)
    if len(met) == len(steps):
        return TrajectoryVerdict(
            True, "in order: " + ", ".join(f"call {c.index}" for c in met), met[-1]
        )
    missing = steps[len(met)].pattern
    if not met:
        return TrajectoryVerdict(
            False, f"no call matches the first, '{missing}' ({_calls(calls)} made){_last(calls)}"
        )
    last = met[-1]
    return TrajectoryVerdict(
        False,
        f"{len(met)} of {len(steps)} in order (the last at {last.show()}); "
        f"no later call matches '{missing}'",
        last,
    )


def _args(a: TrajectoryAssertion, calls: Sequence[Call]) -> TrajectoryVerdict:
    tool = re.compile(a.tool)
    form = parse_assertion(a.assertion)
    first: tuple[Call, str] | None = None
    for call in calls:
        if not tool.search(call.tool):
            continue
        passed, detail = form.check(*first_match(a.path, call.arguments))
        if passed:
            return TrajectoryVerdict(True, f"{a.path} {detail}: {call.show()}", call)
        first = first or (call, detail)
    if first is None:
        return TrajectoryVerdict(
            False, f"no call is to a tool matching '{a.tool}' ({_calls(calls)} made)"
        )
    call, detail = first
    return TrajectoryVerdict(
        False, f"no call to '{a.tool}' has {a.path} {a.assertion}: {call.show()}: {detail}", call
    )


def _max_calls(a: TrajectoryAssertion, calls: Sequence[Call]) -> TrajectoryVerdict:
    if len(calls) <= a.value:
        return TrajectoryVerdict(True, f"{_calls(calls)} (max {a.value})")
    over = calls[a.value]
    return TrajectoryVerdict(
        False,
        f"{_calls(calls)}, more than the {a.value} allowed; the first over: {over.show()}",
        over,
    )


def _no_loop(a: TrajectoryAssertion, calls: Sequence[Call]) -> TrajectoryVerdict:
    run, previous = 0, None
    for call in calls:
        key = call.key()
        run = run + 1 if key == previous else 1
        previous = key
        if run == a.value:
            return TrajectoryVerdict(
                False,
                f"the same call {a.value} times running, calls {call.index - run + 1}"
                f"-{call.index}: {call.show()}",
                call,
            )
    return TrajectoryVerdict(True, f"no call repeated {a.value} times running")


def _all_ok(a: TrajectoryAssertion, calls: Sequence[Call]) -> TrajectoryVerdict:
    pattern = re.compile(a.pattern)
    matched = unknown = 0
    first_unknown: Call | None = None
    for call in calls:
        if not call.matches(pattern):
            continue
        matched += 1
        if call.exit_code is None:
            unknown += 1
            first_unknown = first_unknown or call
        elif call.exit_code != 0:
            return TrajectoryVerdict(False, f"a call failed: {call.show()}", call)
    if first_unknown is not None:
        return TrajectoryVerdict(
            None,
            f"{unknown} of {matched} calls give no exit status, cannot decide: "
            f"{first_unknown.show()}",
            first_unknown,
        )
    return TrajectoryVerdict(True, f"all {matched} matching calls exited 0")


def _calls(calls: Sequence[Call]) -> str:
    return "1 call" if len(calls) == 1 else f"{len(calls)} calls"


def _last(calls: Sequence[Call]) -> str:
    return f" (the last: {calls[-1].show()})" if calls else ""


_EVALUATORS = {
    "used": _used,
    "forbidden": _forbidden,
    "order": _order,
    "args": _args,
    "max_calls": _max_calls,
    "no_loop": _no_loop,
    "all_ok": _all_ok,
}
