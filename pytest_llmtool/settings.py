"""Options: every `--llm-x` flag has an `llm_x` ini key; the flag wins, then the ini, then
the default. They are resolved and checked once, in `pytest_configure`, so a bad value is a
one-line usage error before anything runs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_llmtool.agents import ModelSpec, UnknownModel, resolve_model


@dataclass(frozen=True)
class OptionDef:
    name: str
    metavar: str
    default: str
    help: str


OPTIONS = (
    OptionDef(
        "llm_model",
        "NAMES",
        "oracle",
        "comma-separated models to evaluate; each task runs once per model (offline: oracle, nop)",
    ),
    OptionDef("llm_max_turns", "N", "10", "model calls allowed per task before it is cut off"),
    OptionDef("llm_report", "DIR", "", "write report.json and report.md into DIR"),
    OptionDef(
        "llm_datasets",
        "GLOBS",
        "*.jsonl",
        "file-name patterns of JSONL files that may be datasets; a matching file is "
        "collected only if one of its first lines is a task object (with id and prompt)",
    ),
)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("llmtool", "LLM tool-use evaluations (pytest-llmtool)")
    for opt in OPTIONS:
        group.addoption(
            "--" + opt.name.replace("_", "-"),
            dest=opt.name,
            default=None,
            metavar=opt.metavar,
            help=f"{opt.help} (ini: {opt.name}; default: {opt.default or 'none'})",
        )
        parser.addini(opt.name, help=opt.help, default=opt.default)


def _raw(config: pytest.Config, name: str) -> tuple[str, bool]:
    """The option's text and whether it came from the command line."""
    cli = config.getoption(name)
    if cli is not None:
        return str(cli), True
    return str(config.getini(name)), False


def _split(value: str) -> list[str]:
    return [part for part in re.split(r"[,\s]+", value) if part]


@dataclass(frozen=True)
class Settings:
    models: tuple[ModelSpec, ...]
    max_turns: int
    report_dir: Path | None
    dataset_patterns: tuple[str, ...]

    @classmethod
    def from_config(cls, config: pytest.Config) -> Settings:
        names = _split(_raw(config, "llm_model")[0])
        if not names:
            raise pytest.UsageError("--llm-model: name at least one model")
        if len(set(names)) != len(names):
            raise pytest.UsageError(f"--llm-model: a model is named twice in {names}")
        try:
            models = tuple(resolve_model(name) for name in names)
        except UnknownModel as exc:
            raise pytest.UsageError(f"--llm-model: {exc}") from None

        turns_text = _raw(config, "llm_max_turns")[0]
        try:
            max_turns = int(turns_text)
        except ValueError:
            max_turns = 0
        if max_turns < 1:
            raise pytest.UsageError(
                f"--llm-max-turns: expected a positive integer, got {turns_text!r}"
            )

        report_text, from_cli = _raw(config, "llm_report")
        report_dir = None
        if report_text.strip():
            # A flag is relative to where pytest was invoked; an ini value to the ini file.
            base = config.invocation_params.dir if from_cli else config.rootpath
            report_dir = base / report_text.strip()

        patterns = tuple(_split(_raw(config, "llm_datasets")[0]))
        return cls(models, max_turns, report_dir, patterns)
