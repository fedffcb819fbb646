"""The variants file of `--llm-harbor-variants`: the agent variants every Harbor task runs
under, as ot-harness compares them (the same tasks with and without an MCP server or a
skills folder). Read here, below the options, so that a bad file is a usage error naming
its line before anything runs; `kinds/harbor/variants.py` applies them.

The file is a YAML list, one mapping per variant:

    - {id: base, kind: base}
    - {id: onetool, kind: mcp, mcp: {name: onetool, url: "http://127.0.0.1:8760/mcp"}}
    - {id: skills, kind: skills, skills_dir: skills/}   # relative to the file
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml

from pytest_llmtool.inputs.safe_yaml import Unreadable, read_yaml_file

VariantKind = Literal["base", "mcp", "skills"]
KINDS: tuple[VariantKind, ...] = ("base", "mcp", "skills")
# An id is part of an item's name (`task[model-id]`): no brackets, spaces or separators.
_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_KEYS = {"id", "kind", "skills_dir", "mcp"}
_MCP_KEYS = {"name", "url", "command", "args"}


@dataclass(frozen=True)
class McpSpec:
    """The MCP server an `mcp` variant adds: over HTTP (`url`) or a command run as a stdio
    server (`command` and `args`)."""

    name: str
    url: str | None = None
    command: str | None = None
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class HarborVariant:
    """One variant: `base` (the agent as it is), `mcp` (plus `mcp`'s server), `skills`
    (plus the folder `skills_dir`, one skill per subdirectory with its SKILL.md)."""

    id: str
    kind: VariantKind
    skills_dir: Path | None = None
    mcp: McpSpec | None = None


class VariantsError(ValueError):
    """The variants file is bad; the message names `file:line`."""


def read_variants(path: Path, max_bytes: int) -> tuple[HarborVariant, ...]:
    """Every variant of the file, in its order; `VariantsError` at the first problem."""
    data = read_yaml_file(path, max_bytes)
    if isinstance(data, Unreadable):
        line = re.match(r"line (\d+): ", data.message)
        where = f"{path}:{line[1]}: " if line else f"{path}: "
        raise VariantsError(where + data.message[line.end() if line else 0 :])
    if not isinstance(data, list) or not data:
        raise VariantsError(f"{path}:1: expected a list of variants ({{id, kind}} each)")
    lines = _item_lines(path)
    variants: list[HarborVariant] = []
    for index, entry in enumerate(data):
        where = f"{path}:{lines[index] if index < len(lines) else 1}"
        try:
            variant = _variant(entry, path.parent)
        except ValueError as exc:
            raise VariantsError(f"{where}: variant {index + 1}: {exc}") from None
        if any(v.id == variant.id for v in variants):
            raise VariantsError(f"{where}: variant id {variant.id!r} is named twice")
        if variant.kind == "base" and any(v.kind == "base" for v in variants):
            raise VariantsError(
                f"{where}: a second base variant (the others are compared with one)"
            )
        variants.append(variant)
    return tuple(variants)


def _item_lines(path: Path) -> list[int]:
    """The 1-based line of each item of the top-level list (the file already parsed)."""
    node = yaml.compose(path.read_text(encoding="utf-8-sig"), Loader=yaml.SafeLoader)
    items = node.value if isinstance(node, yaml.SequenceNode) else []
    return [item.start_mark.line + 1 for item in items]


def _variant(entry: Any, base: Path) -> HarborVariant:
    if not isinstance(entry, dict):
        raise ValueError("expected a mapping with id and kind")
    unknown = sorted(str(k) for k in entry if k not in _KEYS)
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(_KEYS))})")
    ident, kind = entry.get("id"), entry.get("kind")
    if not isinstance(ident, str) or not _ID.fullmatch(ident):
        hint = (
            " (YAML reads yes/no/on/off as booleans: quote it)" if isinstance(ident, bool) else ""
        )
        raise ValueError(
            f"id: expected letters, digits, '_', '.' or '-' (at most 64), got {ident!r}{hint}"
        )
    if kind not in KINDS:
        raise ValueError(f"kind: expected base, mcp or skills, got {kind!r}")
    if kind != "skills" and "skills_dir" in entry:
        raise ValueError(f"skills_dir: only a skills variant has one (this is {kind})")
    if kind != "mcp" and "mcp" in entry:
        raise ValueError(f"mcp: only an mcp variant has one (this is {kind})")
    if kind == "skills":
        return HarborVariant(ident, kind, skills_dir=_skills_dir(entry.get("skills_dir"), base))
    if kind == "mcp":
        return HarborVariant(ident, kind, mcp=_mcp(entry.get("mcp")))
    return HarborVariant(ident, "base")


def _skills_dir(value: Any, base: Path) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("skills_dir: a skills variant needs the folder of its skills")
    folder = (base / value).resolve()
    if not folder.is_dir():
        raise ValueError(f"skills_dir: {folder} is not a directory")
    if not any((child / "SKILL.md").is_file() for child in folder.iterdir()):
        raise ValueError(f"skills_dir: {folder} has no <skill>/SKILL.md")
    return folder


def _mcp(value: Any) -> McpSpec:
    if not isinstance(value, dict):
        raise ValueError("mcp: an mcp variant needs {name, url} or {name, command, args}")
    unknown = sorted(str(k) for k in value if k not in _MCP_KEYS)
    if unknown:
        raise ValueError(f"mcp: unknown key {unknown[0]!r} (allowed: name, url, command, args)")
    name, url, command = value.get("name"), value.get("url"), value.get("command")
    if not isinstance(name, str) or not _ID.fullmatch(name):
        raise ValueError(f"mcp.name: expected a server name, got {name!r}")
    if (url is None) == (command is None):
        raise ValueError("mcp: give exactly one of url (HTTP) and command (stdio)")
    if url is not None:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"mcp.url: expected an http(s) URL, got {url!r}")
        if parts.query or parts.fragment:
            raise ValueError("mcp.url: no query or fragment (as ot-harness requires)")
        return McpSpec(name, url=url)
    args = value.get("args", [])
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f"mcp.command: expected a program, got {command!r}")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError("mcp.args: expected a list of strings")
    return McpSpec(name, command=command, args=tuple(args))
