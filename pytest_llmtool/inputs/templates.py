"""Folders a scenario names as its template, or an optimization task as its project: the
host run never collects them.

They are copied into a sandbox and run there; collected by the host, their `conftest.py` was
imported outside the jail with the run's environment (its API keys), and their own `tests/`
ran as the outer suite's tests. A template or project lies inside its YAML file's directory,
so whether pytest is about to enter a declared folder is known from the YAML files of the
folders above it, whatever order pytest walks them in: each folder's are read once.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_llmtool.inputs.lines import MAX_YAML_BYTES, read_head

# A YAML file that may declare a folder: a top-level `template_folder:`, or `optimization:`
# (whose `project:` is a key below it).
_DECLARES = re.compile(rb"^(?:\xef\xbb\xbf)?(?:template_folder|optimization)\s*:", re.MULTILINE)
_NONE: dict[str, Path] = {}


class DeclaredFolders:
    """Which folders under `root` the YAML files above them declare, and which of them a
    run kept out (for `--llm-explain-collect`). Asked for every path pytest walks: folders
    are their (normalized, absolute) path strings, which pytest's paths already are."""

    def __init__(self, root: Path) -> None:
        self.root = os.fspath(root)
        self.kept_out: dict[Path, Path] = {}  # folder -> the file that declares it
        self._below: dict[str, dict[str, Path]] = {}

    def declaring(self, path: Path) -> Path | None:
        """The scenario or task file that names `path` as its template or project, if any."""
        text = os.fspath(path)
        declared = self._declared_above(os.path.dirname(text))
        found = declared.get(text) if declared else None
        if found is not None:
            self.kept_out[path] = found
        return found

    def _declared_above(self, folder: str) -> dict[str, Path]:
        known = self._below.get(folder)
        if known is not None:
            return known
        parent = os.path.dirname(folder)
        inherited = (
            _NONE if folder == self.root or parent == folder else self._declared_above(parent)
        )
        own = _declared_in(folder)
        self._below[folder] = merged = {**inherited, **own} if own else inherited
        return merged


def _declared_in(folder: str) -> dict[str, Path]:
    """The folders the YAML files directly in `folder` declare, each with its file."""
    found: dict[str, Path] = {}
    try:
        entries = [e for e in os.scandir(folder) if e.name.endswith((".yaml", ".yml"))]
    except OSError:
        return found
    for entry in entries:
        path = Path(entry.path)
        try:
            raw = read_head(path, MAX_YAML_BYTES)[0] if entry.is_file() else b""
        except OSError:
            continue
        if not _DECLARES.search(raw):
            continue
        for value in _named_folders(raw):
            declared = os.path.normpath(os.path.join(folder, value))
            # Only a folder below the file's own: that is all a task may name, and the file's
            # own folder (`template_folder: .`) holds the file itself.
            if declared.startswith(folder.rstrip(os.sep) + os.sep):
                found.setdefault(declared, path)
    return found


def _named_folders(raw: bytes) -> list[str]:
    """A scenario's `template_folder` and an optimization task's `project`, when the file is
    YAML that holds them; read safely (bounded, no alias bombs)."""
    import yaml

    from pytest_llmtool.inputs.safe_yaml import load_yaml

    try:  # UnicodeDecodeError and UnsafeYaml are ValueErrors
        data: Any = load_yaml(raw.decode("utf-8-sig"))
    except (yaml.YAMLError, ValueError, RecursionError):
        return []
    if not isinstance(data, dict):
        return []
    optimization = data.get("optimization")
    named = [data.get("template_folder")]
    if isinstance(optimization, dict):
        named.append(optimization.get("project"))
    return [value for value in named if isinstance(value, str) and value]


FOLDERS_KEY = pytest.StashKey[DeclaredFolders]()
