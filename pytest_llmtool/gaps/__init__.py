"""Gaps: the gap report's classification (this module), the replay of recorded runs and
its writer. May import: everything up to `kinds`.

The gap report (`--llm-gaps=DIR`, `llmtool gaps`): what in the tool tripped the agents.

Every tool call that exited non-zero is classified from its stderr (and exit status) the way
bashkit and real bash word their errors: a **parse error** (the shell, or awk, sed, jq, a
regex, could not read the program), a **missing command** (or a missing subcommand of a
CLI), an **unknown option** (rejected, or "not yet implemented in bashkit"), an
**unsupported feature** (network, pipes in awk, "not supported in virtual mode", a Python
module bashkit disables or leaves out), or **other** (missing files, bad input, resource
limits, failures that print nothing). Calls of the same class and subject form one gap
(`missing command: zcat`, `unknown option: zip -q`; bashkit names an option it has not
implemented by its long name, so `ls -Z` is `ls --context`); gaps are ranked by the tasks
they touch, then by failed calls, each with one example.

A task that every model fails (at least two models, most attempts of each failing) while
each model's failed attempts hit the same gap is marked a likely tool gap: seed 000's "fails
for all models" with a cause attached. A gap that is the sandbox's own refusal (bashkit
saying a module is disabled, an option or feature not supported or not implemented, a
command not available in the sandbox) is a tool gap whatever the models did, and is named
so (`bashkit python3: module re disabled`). Replaying recorded runs (`gaps/replay.py`) gives
each gap's calls then and now; `compare` reads which gaps are fixed. Under
`--llm-bash=bashkit,container` each failed bashkit attempt was replayed in a container as it
ran (`kinds/bash/real_shell.py`); `attributions` reads whose failure each was.

Pure functions over results; nothing here runs a sandbox.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel, Field, computed_field

from pytest_llmtool.records import EvalReport, ToolCallResult
from pytest_llmtool.stats.compare import task_of

GAPS_SCHEMA_VERSION = 1

GapClass = Literal[
    "parse_error", "missing_command", "unknown_option", "unsupported_feature", "other"
]
CLASSES: tuple[GapClass, ...] = (
    "parse_error",
    "missing_command",
    "unknown_option",
    "unsupported_feature",
    "other",
)
CLASS_NAMES: dict[GapClass, str] = {
    "parse_error": "parse error",
    "missing_command": "missing command",
    "unknown_option": "unknown option",
    "unsupported_feature": "unsupported feature",
    "other": "other",
}

# How much of a call's script a gap keeps as its example, and of a subject or message.
EXAMPLE_CHARS = 2000
SUBJECT_CHARS = 120
MESSAGE_CHARS = 300
# How much of a call's output is read: its first lines, each cut (the first error is the
# cause, usually; a megabyte of output must not cost seconds of regular expressions).
LINES_READ = 200
LINE_CHARS = 2000
# The subject of a command given by its path (`./run.sh`, `/app/todo.sh`): one gap for all.
BY_PATH = "(a command run by its path)"


# --- classifying one failed call ---------------------------------------------------------------


@dataclass(frozen=True)
class Classified:
    """Why one call failed: its class, what the gap is about, and the stderr line it was read
    from (empty when the call printed nothing). `silent` failures (no message at all: `grep`
    finding nothing, `test` saying no) are never a likely tool gap. `refusal` names what the
    sandbox (or tool) said it leaves out on purpose (`python3: module re disabled`): a tool
    gap whatever the models did; `only_in` names the one sandbox where it is (a module
    bashkit's Python cannot import, which any other Python lacks only if not installed)."""

    gap_class: GapClass
    subject: str
    message: str
    hint: str | None = None
    silent: bool = False
    refusal: str | None = None
    only_in: str | None = None

    @property
    def key(self) -> str:
        return gap_key(self.gap_class, self.subject)


def gap_key(gap_class: GapClass, subject: str) -> str:
    return f"{CLASS_NAMES[gap_class]}: {subject}"


_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "-bash"})
# The prefixes a shell puts before its own messages: `bash: line 3: `, `bash: -c: line 1: `,
# `/bin/sh: 1: ` (dash), and bashkit's older `execution error: `.
_SHELL_PREFIX = re.compile(
    r"^(?:execution error: )?(?:(?:/usr)?(?:/bin/)?(?P<shell>(?:ba|z|k|da)?sh): )"
    r"(?:-c: )?(?:line \d+: |\d+: )?"
)
# A script the shell was running names itself instead: `/scripts/x.sh: line 13: `.
_SCRIPT_PREFIX = re.compile(r"^(?:\S*/\S+|[\w.-]+\.sh): line \d+: ")
_EXECUTION_ERROR = re.compile(r"^execution error: ")
_COMMAND_PREFIX = re.compile(r"^(?P<cmd>[A-Za-z_][\w.+-]*): (?P<rest>.+)$")

# Parse errors of the shell itself.
_BASHKIT_PARSE = re.compile(
    r"parse error(?: at line \d+, column \d+)?: (?:syntax error: )?(?P<msg>.+)$"
)
_BASH_SYNTAX = re.compile(
    r"^(?:syntax error(?:: | near | in )|Syntax error: |unexpected EOF while looking for matching )"
)
_ARITHMETIC = re.compile(
    r"^(?P<expr>.+?): (?:arithmetic )?syntax error(?: in expression)?: (?P<msg>.+)$"
)
_DASH_ARITHMETIC = re.compile(r"^arithmetic expression: (?P<msg>[^:]+)")
# Parse errors of a program another command reads (awk, sed, jq, grep's regex, bc).
_SYNTAX_WORDS = re.compile(
    r"syntax error|parse error|compile error|unexpected (?:character|token|newline|end|EOF|"
    r"symbol|input)|unterminated|expected ['\"`\]\)\}]|expected closing|invalid assignment "
    r"target|unknown command|invalid (?:regex|regular expression|pattern)|no program given|"
    r"unbalanced|unmatched|missing [\]\)\}'\"]",
    re.IGNORECASE,
)
_PROGRAM_POSITION = re.compile(
    r"^(?:cmd\. line:\d+:|-e expression #\d+, char \d+:|line \d+:|\(standard_in\) \d+:)\s*\^?\s*"
)
_BC_PARSE = re.compile(r"^\(standard_in\) \d+: (?P<msg>(?:parse|syntax) error.*)$")

# Missing commands, and missing subcommands of a CLI.
_NOT_FOUND = re.compile(
    r"^(?P<cmd>.+?): command not found(?:[.:]?\s*(?P<hint>.*?))?(?=(?:ba)?sh: |$)"
)
_ZSH_NOT_FOUND = re.compile(r"command not found: (?P<cmd>\S+)")
_DASH_NOT_FOUND = re.compile(r"^(?P<cmd>[^\s:]+): not found$")
_SUBCOMMANDS = (
    # cobra: Error: unknown command "frob" for "tool"
    re.compile(r'unknown command "(?P<sub>[^"]+)" for "(?P<prog>[^"]+)"'),
    # argparse: tool: error: argument command: invalid choice: 'frob' (choose from ...)
    re.compile(
        r"^(?:usage: )?(?P<prog>\S+): error: argument [^:]+: invalid choice: '(?P<sub>[^']+)'"
    ),
    # git and friends: git: 'frob' is not a git command.
    re.compile(r"^(?P<prog>[\w.-]+): '(?P<sub>[^']+)' is not a [\w.-]+ command"),
    # click: Error: No such command 'frob'.  clap: error: unrecognized subcommand 'frob'
    re.compile(
        r"(?:No such command|unrecognized subcommand) ['\"\u201c\u2018]"
        r"(?P<sub>[^'\"\u201d\u2019]+)['\"\u201d\u2019]",
        re.I,
    ),
)
_USAGE = re.compile(r"^\s*(?:Usage|usage|USAGE): +(?P<prog>[^\s\[]+)", re.MULTILINE)
_GO_USAGE = re.compile(r"^Usage of (?P<prog>\S+?):", re.MULTILINE)

# Options a command rejects, or has not implemented.
_SHORT_OPTION = re.compile(
    r"^(?P<cmd>[\w.+-]+): (?:invalid|illegal|unknown) option -- ?['\"]?(?P<opt>[^'\"\s])"
)
_LONG_OPTION = re.compile(
    r"^(?P<cmd>[\w.+-]+): (?:unrecognized|unknown|invalid|illegal) option "
    r"['\"`\u2018]?(?P<opt>-[^'\"\u2019\s=]*)"
)
_DASH_OPTION = re.compile(r"^(?P<cmd>[\w.+-]+): Illegal option (?P<opt>-\S+)")
_BUILTIN_OPTION = re.compile(r"^(?P<cmd>[\w.+-]+): (?P<opt>-[\w-]+): invalid option")
_SET_OPTION = re.compile(r"^set: (?P<name>\S+): invalid option name")
_SHOPT_OPTION = re.compile(r"^shopt: (?P<name>\S+): invalid shell option name")
_FIND_PREDICATE = re.compile(
    r"^(?P<cmd>find): unknown predicate [`'\u2018](?P<opt>-[^'\u2019`]+)['\u2019]"
)
_NOT_IMPLEMENTED_OPTIONS = re.compile(
    r"^(?P<cmd>[\w.+-]+): option\(s\) not yet implemented in bashkit: (?P<opts>\S+)"
)
_OPTION_NOT_SUPPORTED = re.compile(
    r"^(?P<cmd>[\w.+-]+): (?P<opt>--?[\w-]+)(?:/\S+)* (?:option )?not (?:yet )?"
    r"(?:implemented|supported)"
)
# `cat -A` read as a file named `-A` by a cat that has no such option.
_OPTION_AS_FILE = re.compile(
    r"^(?P<cmd>[\w.+-]+): (?P<opt>-[\w-]+): (?:io error: )?(?:file not found|No such file)"
)
_CLAP_ARGUMENT = re.compile(r"^error: unexpected argument '(?P<opt>[^']+)' found", re.MULTILINE)
_ARGPARSE_OPTION = re.compile(
    r"^(?P<prog>\S+): error: unrecognized arguments?: (?P<opt>\S+)", re.MULTILINE
)
_FLAG_ERRORS = (
    re.compile(r"No such option: (?P<opt>-\S+)", re.IGNORECASE),  # click
    re.compile(r"unknown flag: (?P<opt>--?\S+)"),  # cobra
    re.compile(r"flag provided but not defined: (?P<opt>-\S+)"),  # Go's flag
)
_COBRA_SHORTHAND = re.compile(r"unknown shorthand flag: '(?P<c>.)'")

# Features a command has but this sandbox does not give (network, pipes from awk, ...).
_UNSUPPORTED = re.compile(
    r"network access not configured|requires the '[^']+' feature|not (?:yet )?implemented|"
    r"NotImplemented|not supported|unsupported|not available|only [\w ]{1,40} supported|"
    r"\bdisabled\b",
    re.IGNORECASE,
)
# The sandbox's own refusals, as bashkit words them: what it leaves out on purpose and says
# so (`python3: importing module 're' is disabled`, `env: -u option not supported`, `curl:
# network access not configured`, `apt: command not found. Package managers are not
# available in the sandbox.`); not "unsupported" or "not available" alone, which a task's
# own script or data says as often.
_REFUSAL = re.compile(
    r"\bdisabled\b|not (?:yet )?(?:implemented|supported)|network access not configured|"
    r"requires the '[^']+' feature",
    re.IGNORECASE,
)
_DISABLED_MODULE = re.compile(
    r"^(?P<cmd>[\w.+-]+): importing module '(?P<mod>[^']+)' is disabled", re.IGNORECASE
)
# bashkit's Python leaves standard modules out (subprocess, socket, threading...) and imports
# no other: no package, not even a module file beside the script (no `pip` either).
_NO_MODULE = re.compile(r"^ModuleNotFoundError: No module named '(?P<mod>[^']+)'")
_PYTHON = re.compile(r"(?<![\w./-])(?:\S*/)?(?P<name>python3?)(?![\w.-])")
_LEFT_OUT = re.compile(
    r"not available|requires the '[^']+' feature|without privilege restrictions", re.IGNORECASE
)
# A command that is the task's own script, not the sandbox's: its words are not a refusal.
_SCRIPT_NAME = re.compile(r"\.(?:sh|bash|py)$")

_UNBOUND = re.compile(r"^\S+: unbound variable$")
_NOISE = re.compile(r"^(?:\+ |Usage:|usage:|Try '|For more information|\s*tip:|\s*\^?\s*$)")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`']*'|\u2018[^\u2019]*\u2019")
_PATHLIKE = re.compile(r"[^\s:'\"(),]*/[^\s:'\"(),]*")


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _option(opt: str) -> str:
    """An option as the gap names it: without its value (`--width=3` -> `--width`)."""
    return opt.split("=", 1)[0].rstrip(",;")


def _long_name(name: str) -> str:
    """bashkit names an unimplemented option by its long name, without dashes."""
    name = name.split(",", 1)[0].strip()
    return name if name.startswith("-") else ("-" if len(name) == 1 else "--") + name


def _parse_message(message: str) -> str:
    message = re.sub(r"\s*\(error token is .*\)$", "", message)
    message = re.sub(r"\s*at <top-level>, line \d+:?", "", message)
    message = re.sub(r"\bat line \d+(?:, column \d+)?", "", message)
    return _one_line(message.rstrip(":"), SUBJECT_CHARS)


def _normalised(rest: str) -> str:
    """An error message with what varies from call to call (quoted values, paths) elided."""
    rest = re.sub(r"\s*at line \d+,? column \d+", "", rest)
    return _one_line(_PATHLIKE.sub("…", _QUOTED.sub("…", rest)), SUBJECT_CHARS)


def _first_word(commands: str) -> str | None:
    for raw in commands.splitlines():
        words = raw.split()
        while words and "=" in words[0] and not words[0].startswith(("=", "-")):
            words.pop(0)  # VAR=value before the command
        if words and not words[0].startswith("#"):
            return words[0].rsplit("/", 1)[-1] or None
    return None


_KEYWORDS = frozenset(
    {"then", "do", "done", "fi", "else", "elif", "esac", "}", "{", "(", ")", "!", "if", "while"}
)


def last_command(commands: str) -> str | None:
    """A guess at the command whose status the call returned: the first word of the last
    simple command of the last line (after `|`, `;`, `&&`, `||`); None when that is shell
    syntax (`done`, `fi`) rather than a command."""
    lines = [ln for ln in commands.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if not lines:
        return None
    last = re.split(r"\|\||&&|(?<![<>])[|;&](?!>)", lines[-1])[-1].split()
    while last and re.match(r"^\d*[<>]", last[-1]):
        last.pop()  # a redirection (`2>&1`, `>out`) after the command
    while last and "=" in last[0] and not last[0].startswith(("=", "-")):
        last.pop(0)
    if not last or last[0] in _KEYWORDS or not re.match(r"^[\w./\[-]+$", last[0]):
        return None
    return last[0].rsplit("/", 1)[-1] or None


def _program(stderr: str, commands: str) -> str:
    """The CLI a subcommand or option error is about: its usage line says, else the call."""
    usage = _USAGE.search(stderr) or _GO_USAGE.search(stderr)
    if usage:
        return usage.group("prog").rsplit("/", 1)[-1]
    return _first_word(commands) or "?"


def _from_shell(raw: str) -> tuple[str | None, str]:
    """(the shell that said it, or None when no shell did; the message without its prefix)."""
    said = _SHELL_PREFIX.match(raw)
    if said:
        return said.group("shell"), raw[said.end() :]
    body = _EXECUTION_ERROR.sub("", raw)
    script = _SCRIPT_PREFIX.match(body)
    if script:
        return "bash", body[script.end() :]
    return None, body


def _classify_line(line: str, stderr: str, commands: str) -> Classified | None:
    """The class of one stderr line, or None when it is not a recognised kind of gap."""
    raw = line.strip()[:LINE_CHARS]
    shell, body = _from_shell(raw)
    from_shell = shell is not None
    message = _one_line(raw, MESSAGE_CHARS)

    # Parse errors of the shell: bashkit's "parse error at line N, column M: ..." (after any
    # prefix), real bash's "syntax error ...", dash's "Syntax error: ...", and arithmetic
    # that does not parse. Named after the shell that said it (bashkit: bash).
    shell = shell or "bash"
    parsed = _BASHKIT_PARSE.search(body)
    if parsed and _shell_parse_prefix(body[: parsed.start()]):
        subject = f"{shell}: {_parse_message(parsed.group('msg'))}"
        return Classified("parse_error", subject, message)
    if from_shell and _BASH_SYNTAX.match(body):
        text = re.sub(r"^(?:syntax error: |Syntax error: )", "", body)
        return Classified("parse_error", f"{shell}: {_parse_message(text)}", message)
    arithmetic = _ARITHMETIC.match(body) or (from_shell and _DASH_ARITHMETIC.match(body))
    if arithmetic and (from_shell or body.startswith(("let:", "((", "declare:", "local:"))):
        subject = f"{shell}: arithmetic: {_parse_message(arithmetic.group('msg'))}"
        return Classified("parse_error", subject, message)

    # Missing commands: bashkit and bash "X: command not found", dash "X: not found", zsh.
    found = _NOT_FOUND.match(body)
    if found:
        cmd = found.group("cmd")
        subject = BY_PATH if "/" in cmd else cmd
        hint = (found.group("hint") or "").strip() or None
        refusal = None
        if hint and "/" not in cmd and _LEFT_OUT.search(hint):
            refusal = f"{cmd}: {hint.partition('.')[0]}"
        return Classified("missing_command", subject, message, hint=hint, refusal=refusal)
    zsh = _ZSH_NOT_FOUND.search(raw)
    if zsh and raw.startswith("zsh:"):
        cmd = zsh.group("cmd")
        return Classified("missing_command", BY_PATH if "/" in cmd else cmd, message)
    dash = _DASH_NOT_FOUND.match(body)
    if dash and from_shell:
        cmd = dash.group("cmd")
        return Classified("missing_command", BY_PATH if "/" in cmd else cmd, message)
    for pattern in _SUBCOMMANDS:
        sub = pattern.search(raw)
        if sub:
            named = sub.groupdict().get("prog") or _program(stderr, commands)
            prog = named.split()[0].rsplit("/", 1)[-1]
            return Classified("missing_command", f"{prog} {sub.group('sub')}", message)

    # Options: GNU's "invalid option -- 'Z'" and "unrecognized option '--x'", bash builtins'
    # "-Q: invalid option", bashkit's "not yet implemented in bashkit", CLI frameworks'.
    option = _option_subject(body, stderr, commands)
    if option:
        said = _REFUSAL.search(body)
        refusal = f"{option}: {said.group(0)}" if said else None
        return Classified("unknown_option", option, message, refusal=refusal)

    # Programs another command reads: awk, sed, jq, grep's regex, bc.
    bc = _BC_PARSE.match(body)
    if bc:
        return Classified("parse_error", "bc: " + _parse_message(bc.group("msg")), message)
    command = _COMMAND_PREFIX.match(body)
    if command and command.group("cmd") not in _SHELLS:
        rest = _PROGRAM_POSITION.sub("", command.group("rest").strip())
        if _SYNTAX_WORDS.search(rest):
            subject = f"{command.group('cmd')}: {_parse_message(rest)}"
            return Classified("parse_error", subject, message)

    # Features the sandbox leaves out: a module of Python's, or what a command says it does
    # not do here; a refusal when the command says it in the sandbox's words.
    module = _DISABLED_MODULE.match(body)
    if module:
        subject = f"{module.group('cmd')}: module {module.group('mod')} disabled"
        return Classified("unsupported_feature", subject, message, refusal=subject)
    module = _NO_MODULE.match(body)
    if module:
        python = _PYTHON.search(commands)
        name = python.group("name") if python else "python3"
        subject = f"{name}: module {module.group('mod')} not available"
        standard = module.group("mod").partition(".")[0] in sys.stdlib_module_names
        only_in = None if standard else "bashkit"
        return Classified("unsupported_feature", subject, message, refusal=subject, only_in=only_in)
    if _UNSUPPORTED.search(body):
        subject = body if command is None else f"{command.group('cmd')}: {command.group('rest')}"
        by_command = command is not None and not _SCRIPT_NAME.search(command.group("cmd"))
        refusal = subject if by_command and _REFUSAL.search(body) else None
        subject = _one_line(subject, SUBJECT_CHARS)
        return Classified("unsupported_feature", subject, message, refusal=refusal)
    return None


def _shell_parse_prefix(before: str) -> bool:
    """Whether what precedes bashkit's "parse error" makes it the shell's: nothing, bash's
    "syntax error: ", or the script it was reading (`/tmp/x.sh: `); not another command's
    (`awk: parse error`)."""
    return not before or before.startswith("syntax error") or "/" in before


def _option_subject(body: str, stderr: str, commands: str) -> str | None:
    for pattern in (_SHORT_OPTION, _BUILTIN_OPTION, _DASH_OPTION, _FIND_PREDICATE, _LONG_OPTION):
        match = pattern.match(body)
        if match:
            opt = match.group("opt")
            opt = _option(opt if opt.startswith("-") else "-" + opt)
            return f"{match.group('cmd')} {opt}"
    named = _SET_OPTION.match(body)
    if named:
        return f"set -o {named.group('name')}"
    named = _SHOPT_OPTION.match(body)
    if named:
        return f"shopt {named.group('name')}"
    listed = _NOT_IMPLEMENTED_OPTIONS.match(body)
    if listed:
        return f"{listed.group('cmd')} {_long_name(listed.group('opts'))}"
    for pattern in (_OPTION_NOT_SUPPORTED, _OPTION_AS_FILE):
        match = pattern.match(body)
        if match:
            return f"{match.group('cmd')} {_option(match.group('opt'))}"
    clap = _CLAP_ARGUMENT.match(body)
    if clap:
        return f"{_program(stderr, commands)} {_option(clap.group('opt'))}"
    argparse = _ARGPARSE_OPTION.match(body)
    if argparse:
        prog = argparse.group("prog").rsplit("/", 1)[-1]
        return f"{prog} {_option(argparse.group('opt'))}"
    for pattern in _FLAG_ERRORS:
        match = pattern.search(body)
        if match:
            return f"{_program(stderr, commands)} {_option(match.group('opt'))}"
    shorthand = _COBRA_SHORTHAND.search(body)
    if shorthand:
        return f"{_program(stderr, commands)} -{shorthand.group('c')}"
    return None


_MERGED_STDERR = re.compile(r"2>&1|&>|\|&")


def classify(commands: str, stderr: str, exit_code: int, stdout: str = "") -> Classified:
    """Why a call that exited `exit_code` (not 0) failed: `_classify`, its subject and hint
    kept to one line of at most `SUBJECT_CHARS`."""
    found = _classify(commands, stderr, exit_code, stdout)
    hint = None if found.hint is None else _one_line(found.hint, MESSAGE_CHARS)
    refusal = None if found.refusal is None else _one_line(found.refusal, SUBJECT_CHARS)
    subject = _one_line(found.subject, SUBJECT_CHARS)
    return replace(found, subject=subject, hint=hint, refusal=refusal)


def _classify(commands: str, stderr: str, exit_code: int, stdout: str) -> Classified:
    """Why a call that exited `exit_code` (not 0) failed, read from its stderr.

    The first stderr line of a recognised class decides (the first error is usually the
    cause); failing that, the first informative line is an `other` gap, keyed by the command
    and its message with file names and quoted values elided. A call that sent its stderr to
    stdout (`2>&1`, `&>`, `|&`) and left stderr empty is read from stdout, for the recognised
    classes only (stdout is mostly data). With no message at all, the gap is keyed by the
    command the status probably came from."""
    lines = stderr.splitlines()[:LINES_READ]
    for line in lines:
        if line.strip():
            found = _classify_line(line, stderr, commands)
            if found is not None:
                return found
    for line in lines:
        if _NOISE.match(line):
            continue
        raw = line.strip()[:LINE_CHARS]
        body = _from_shell(raw)[1]
        command = _COMMAND_PREFIX.match(body)
        if _UNBOUND.match(body):
            subject = "unbound variable"  # `set -u`: one gap whatever the variable
        elif command and command.group("cmd") not in _SHELLS:
            subject = f"{command.group('cmd')}: {_normalised(command.group('rest'))}"
        else:
            subject = _normalised(body)
        return Classified("other", subject, _one_line(raw, MESSAGE_CHARS))
    if stdout and _MERGED_STDERR.search(commands):
        for line in stdout.splitlines()[:LINES_READ]:
            if line.strip():
                found = _classify_line(line, stdout, commands)
                if found is not None:
                    return found
    guess = last_command(commands)
    said = f"exit {exit_code} without a message"
    return Classified("other", f"{guess}: {said}" if guess else said, "", silent=True)


# --- the report's models ---------------------------------------------------------------------


class GapExample(BaseModel):
    """One call of a gap: its script (cut to `EXAMPLE_CHARS`), the stderr line it was
    classified by, its exit status, and whose it was."""

    command: str
    message: str
    exit_code: int
    task: str
    model: str


class Gap(BaseModel):
    """Failed calls of one class and subject. `tasks` are node ids without the model part
    (the same task for every model); `models` counts calls per model; `hint` is what the
    tool said besides the error (bashkit: "Package managers are not available in the
    sandbox."). `likely_tool_gap_tasks` are the tasks this gap is a likely tool gap of;
    `tool_gap` names the sandbox's own refusal the gap is (`bashkit python3: module re
    disabled`), a tool gap whatever the models did."""

    key: str
    gap_class: GapClass
    subject: str
    calls: int
    tasks: list[str]
    models: dict[str, int]
    example: GapExample
    hint: str | None = None
    likely_tool_gap_tasks: list[str] = Field(default_factory=list)
    tool_gap: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def task_count(self) -> int:
        return len(self.tasks)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def likely_tool_gap(self) -> bool:
        return bool(self.likely_tool_gap_tasks)


class LikelyToolGap(BaseModel):
    """A task every model failed, each hitting the same gaps (`gaps`, by key, in rank order)."""

    task: str
    models: list[str]
    gaps: list[str]


class ReplaySource(BaseModel):
    """A recorded run that was replayed: its file, its format (`report.json` or upstream
    bashkit-eval's own JSON), and what it recorded of bashkit and of when it ran."""

    path: str
    format: Literal["report.json", "bashkit-eval"]
    bashkit: str | None = None
    started: str | None = None


class NotReplayed(BaseModel):
    task: str
    model: str
    reason: str


class ReplayGap(BaseModel):
    """One gap in the recorded calls (`then`) and in the same calls replayed on the current
    sandbox (`now`). Of the `then` calls, `then_ok_now` exit 0 now and `then_other_now` fail
    with another gap. `fixed`: every call that hit it exits 0 now; `changed`: none hits it
    now, but some of them fail otherwise (the error moved on, or is worded differently now);
    `remaining`: calls hit it now; `new`: none did then."""

    key: str
    gap_class: GapClass
    subject: str
    then: int
    now: int
    tasks_then: int
    tasks_now: int
    then_ok_now: int
    then_other_now: int
    example: GapExample
    message_now: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> Literal["fixed", "changed", "remaining", "new"]:
        if self.then == 0:
            return "new"
        if self.now:
            return "remaining"
        return "fixed" if self.then_ok_now == self.then else "changed"


class ReplayReport(BaseModel):
    """Recorded runs replayed call by call on the current bashkit sandbox (fresh per task
    attempt, seeded with the task's files). `datasets` says where each recorded dataset was
    found (None: not found); `dataset_rule` how the tasks were looked for."""

    sources: list[ReplaySource]
    bashkit_now: str
    dataset_rule: str
    datasets: dict[str, str | None] = Field(default_factory=dict)
    attempts: int = 0
    calls: int = 0
    failed_then: int = 0
    failed_now: int = 0
    gaps: list[ReplayGap] = Field(default_factory=list)
    not_replayed: list[NotReplayed] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def fixed(self) -> list[str]:
        return [g.key for g in self.gaps if g.status == "fixed"]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def remaining(self) -> list[str]:
        return [g.key for g in self.gaps if g.status == "remaining"]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def changed(self) -> list[str]:
        return [g.key for g in self.gaps if g.status == "changed"]


class Attribution(BaseModel):
    """A bash task attempt that failed in bashkit, its calls replayed in a fresh container
    (`--llm-bash=bashkit,container`, `kinds/bash/real_shell.py`): `bashkit` when they pass
    there (a gap of the emulator), `model` (★) when they fail there too."""

    task: str
    model: str
    trial: int = 0
    cause: Literal["bashkit", "model"]
    detail: str


class GapReport(BaseModel):
    """`gaps.json`: the failed tool calls of a run (or of recorded runs), classified, grouped
    and ranked; with a replay, the same calls then and now; with `--llm-bash=bashkit,container`,
    each failed bashkit attempt attributed to bashkit or to the model."""

    schema_version: int = GAPS_SCHEMA_VERSION
    bashkit: str | None = None
    models: list[str] = Field(default_factory=list)
    tool_calls: int = 0
    failed_calls: int = 0
    by_class: dict[GapClass, int] = Field(default_factory=dict)
    gaps: list[Gap] = Field(default_factory=list)
    likely_tool_gaps: list[LikelyToolGap] = Field(default_factory=list)
    replay: ReplayReport | None = None
    attribution: list[Attribution] = Field(default_factory=list)


# --- grouping and ranking ----------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One scored attempt's tool calls: which task (`task_of` its node id) and model, and
    whether it passed."""

    task: str
    model: str
    passed: bool
    calls: Sequence[ToolCallResult]
    order: tuple[str, int] = ("", 0)
    # Where the calls ran, named in a refusal's tool gap: bashkit for bash tasks and
    # recorded bashkit-eval runs; None for a scenario's own tool.
    sandbox: str | None = "bashkit"


def _mode_suffix(result: object) -> str:
    """`[scripted]` or `[baseline]` for a scripting-tool task: each tool mode is its own
    unit, as the comparisons pair them (read defensively: older records have no modes)."""
    mode = getattr(getattr(result, "scripting", None), "mode", None)
    return f"[{mode}]" if isinstance(mode, str) else ""


def report_attempts(report: EvalReport) -> list[Attempt]:
    """The bash tasks' and scenarios' attempts of a run, in a fixed order (node id, trial),
    so the gap report does not depend on which worker finished first."""
    attempts = [
        Attempt(
            task_of(r.nodeid) + _mode_suffix(r) + ("" if r.shell == "bashkit" else f"[{r.shell}]"),
            r.model,
            r.passed,
            r.trace.tool_calls,
            (r.nodeid, r.trial),
            sandbox=r.shell,
        )
        for r in report.results
    ]
    attempts += [
        Attempt(
            task_of(r.nodeid) + (f"[{r.guidance}]" if r.guidance else ""),
            r.model,
            r.passed,
            r.trace.tool_calls if r.trace else [],
            (r.nodeid, r.trial),
            sandbox=None,
        )
        for r in report.scenarios
    ]
    return sorted(attempts, key=lambda a: a.order)


def _example(call: ToolCallResult, found: Classified, attempt: Attempt) -> GapExample:
    command = call.commands
    if len(command) > EXAMPLE_CHARS:
        command = command[:EXAMPLE_CHARS] + f"… ({len(call.commands) - EXAMPLE_CHARS} more)"
    return GapExample(
        command=command,
        message=found.message,
        exit_code=call.exit_code,
        task=attempt.task,
        model=attempt.model,
    )


def _refused(attempt: Attempt, found: Classified) -> str | None:
    """A refusal as the gap names it, by the sandbox that said it when one did; None when
    `found` is no refusal where `attempt`'s calls ran."""
    if found.refusal is None or found.only_in not in (None, attempt.sandbox):
        return None
    return f"{attempt.sandbox} {found.refusal}" if attempt.sandbox else found.refusal


def _majority_failed(attempts: Sequence[Attempt]) -> bool:
    """As the cross-model diagnostics count it: most attempts failed (a tie fails)."""
    return 2 * sum(a.passed for a in attempts) <= len(attempts)


def build_gaps(
    attempts: Iterable[Attempt], models: Sequence[str] = (), bashkit: str | None = None
) -> GapReport:
    """Every failed call classified and grouped; gaps ranked by tasks affected, then failed
    calls, then key; the likely tool gaps marked. `models` orders the models (the run's own
    order); others follow in order of appearance."""
    attempts = list(attempts)
    order = list(dict.fromkeys([*models, *(a.model for a in attempts)]))
    rank = {m: i for i, m in enumerate(order)}
    groups: dict[str, list[tuple[Attempt, ToolCallResult, Classified]]] = {}
    # task -> model -> keys its failed attempts hit (silent failures left out)
    hit: dict[str, dict[str, list[set[str]]]] = {}
    by_task: dict[str, dict[str, list[Attempt]]] = {}
    total = failed = 0
    by_class: dict[GapClass, int] = dict.fromkeys(CLASSES, 0)
    for attempt in attempts:
        by_task.setdefault(attempt.task, {}).setdefault(attempt.model, []).append(attempt)
        keys: set[str] = set()
        for call in attempt.calls:
            total += 1
            if call.exit_code == 0:
                continue
            failed += 1
            found = classify(call.commands, call.stderr, call.exit_code, call.stdout)
            by_class[found.gap_class] += 1
            groups.setdefault(found.key, []).append((attempt, call, found))
            if not found.silent:
                keys.add(found.key)
        if not attempt.passed:
            hit.setdefault(attempt.task, {}).setdefault(attempt.model, []).append(keys)

    gaps = []
    for key, members in groups.items():
        first_attempt, first_call, first = members[0]
        per_model: dict[str, int] = {}
        for attempt, _, _ in members:
            per_model[attempt.model] = per_model.get(attempt.model, 0) + 1
        gaps.append(
            Gap(
                key=key,
                gap_class=first.gap_class,
                subject=first.subject,
                calls=len(members),
                tasks=sorted({a.task for a, _, _ in members}),
                models=dict(sorted(per_model.items(), key=lambda kv: rank[kv[0]])),
                example=_example(first_call, first, first_attempt),
                hint=next((f.hint for _, _, f in members if f.hint), None),
                tool_gap=next(filter(None, (_refused(a, f) for a, _, f in members)), None),
            )
        )
    gaps.sort(key=lambda g: (-g.task_count, -g.calls, g.key))
    position = {g.key: i for i, g in enumerate(gaps)}

    likely = []
    for task in sorted(by_task):
        ran_by = by_task[task]
        if len(ran_by) < 2 or not all(_majority_failed(a) for a in ran_by.values()):
            continue
        shared = set.intersection(
            *(set().union(*hit.get(task, {}).get(m, [set()])) for m in ran_by)
        )
        if shared:
            ran = sorted(ran_by, key=lambda m: rank[m])
            likely.append(
                LikelyToolGap(task=task, models=ran, gaps=sorted(shared, key=position.__getitem__))
            )
    for entry in likely:
        for key in entry.gaps:
            gaps[position[key]].likely_tool_gap_tasks.append(entry.task)

    return GapReport(
        bashkit=bashkit,
        models=order,
        tool_calls=total,
        failed_calls=failed,
        by_class=by_class,
        gaps=gaps,
        likely_tool_gaps=likely,
    )


def report_gaps(report: EvalReport) -> GapReport:
    """The gap report of one run."""
    gaps = build_gaps(
        report_attempts(report),
        [m.name for m in report.metadata.models],
        report.metadata.bashkit,
    )
    gaps.attribution = attributions(report)
    return gaps


def attributions(report: EvalReport) -> list[Attribution]:
    """The failed bashkit attempts that were replayed in a container, by node id and trial."""
    replayed = [r for r in report.results if r.real_shell_passed is not None]
    return [
        Attribution(
            task=task_of(r.nodeid),
            model=r.model,
            trial=r.trial,
            cause="bashkit" if r.real_shell_passed else "model",
            detail=r.real_shell_detail or "",
        )
        for r in sorted(replayed, key=lambda r: (r.nodeid, r.trial))
    ]


class ReplayError(Exception):
    """A recorded run that cannot be read or replayed: said in one line (CLI, writer)."""


# --- then and now --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Replayed:
    """One recorded attempt and its calls replayed: `now[i]` is `then[i]` run again."""

    attempt: Attempt
    now: Sequence[ToolCallResult]


def compare(replayed: Iterable[Replayed]) -> tuple[list[ReplayGap], int, int, int]:
    """Per gap, the recorded failed calls against the replayed ones: (gaps, calls replayed,
    failed then, failed now). What still fails comes first: the remaining gaps, the changed,
    the new, then the fixed; each by calls then, then calls now, then key."""
    then: dict[str, list[tuple[Attempt, ToolCallResult, Classified, Classified | None]]] = {}
    now: dict[str, list[tuple[Attempt, ToolCallResult, Classified]]] = {}
    calls = failed_then = failed_now = 0
    for item in replayed:
        for old, new in zip(item.attempt.calls, item.now, strict=True):
            calls += 1
            found_now = None
            if new.exit_code != 0:
                failed_now += 1
                found_now = classify(new.commands, new.stderr, new.exit_code, new.stdout)
                now.setdefault(found_now.key, []).append((item.attempt, new, found_now))
            if old.exit_code != 0:
                failed_then += 1
                found = classify(old.commands, old.stderr, old.exit_code, old.stdout)
                then.setdefault(found.key, []).append((item.attempt, old, found, found_now))
    gaps = []
    for key in set(then) | set(now):
        before, after = then.get(key, []), now.get(key, [])
        ok_now = sum(1 for *_, found_now in before if found_now is None)
        other_now = sum(1 for *_, found_now in before if found_now and found_now.key != key)
        if before:
            attempt, call, found, _ = before[0]
        else:
            attempt, call, found = after[0]
        gaps.append(
            ReplayGap(
                key=key,
                gap_class=found.gap_class,
                subject=found.subject,
                then=len(before),
                now=len(after),
                tasks_then=len({a.task for a, *_ in before}),
                tasks_now=len({a.task for a, *_ in after}),
                then_ok_now=ok_now,
                then_other_now=other_now,
                example=_example(call, found, attempt),
                message_now=after[0][2].message if after else None,
            )
        )
    status_order = {"remaining": 0, "changed": 1, "new": 2, "fixed": 3}
    gaps.sort(key=lambda g: (status_order[g.status], -g.then, -g.now, g.key))
    return gaps, calls, failed_then, failed_now
