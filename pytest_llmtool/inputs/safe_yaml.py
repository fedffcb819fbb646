"""YAML from files we do not control, read without surprises.

`yaml.safe_load` builds no objects, but it still lets a document repeat a key (the last one
silently wins), spell a number as `.nan` or `.inf`, and expand aliases without bound: 470 bytes
of nested `&a [*b, *b, ...]` anchors grow into hundreds of megabytes. Here the document is
composed first (aliases stay shared nodes, so that is cheap), checked, and only then built.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from pytest_llmtool.inputs.lines import MAX_YAML_BYTES, read_head
from pytest_llmtool.inputs.untrusted import shorten, undecodable, wide_encoding

# Values a document may hold once every alias is expanded: a scenario has a few hundred.
MAX_EXPANDED_NODES = 100_000
# Longest single problem a task file's error shows: schema messages quote the offending value.
MAX_PROBLEM = 300
_FLOAT = "tag:yaml.org,2002:float"
_MERGE = "tag:yaml.org,2002:merge"


class UnsafeYaml(ValueError):
    """The document is well-formed YAML that we refuse; the message names where."""


def key_path(parts: Iterable[Any]) -> str:
    """`evaluation.gates[0].type`, or `(top level)` for the document itself."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def schema_problems(schema: dict[str, Any], data: Any) -> list[str]:
    """Where a task file breaks its JSON Schema, `key.path: message` each, in document order."""
    import jsonschema  # only where a YAML kind's file is found

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: (list(e.absolute_path), e.message))
    return [f"{key_path(e.absolute_path)}: {e.message}" for e in errors]


def one_problem(problems: list[str]) -> str:
    """A task file's problems as its item's one error: the first three, each shortened."""
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return "; ".join(shorten(problem, MAX_PROBLEM) for problem in problems[:3]) + more


def load_yaml(text: str) -> Any:
    """The document in `text`, refusing what `yaml.safe_load` would let through.

    Raises `yaml.YAMLError` for invalid YAML and `UnsafeYaml` for a repeated key, a number
    that is not finite, a recursive alias, or aliases expanding past `MAX_EXPANDED_NODES`."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _Checker(loader).size(node, ())
        try:
            return loader.construct_document(node)
        except (ValueError, OverflowError) as exc:  # e.g. an integer of 5,000 digits
            raise UnsafeYaml(f"a value cannot be read: {exc}") from None
    except RecursionError:
        raise UnsafeYaml("the document is nested too deeply") from None
    finally:
        loader.dispose()


class _Checker:
    """One walk over the composed node graph; each shared (aliased) node is sized once."""

    def __init__(self, loader: yaml.SafeLoader) -> None:
        self.loader = loader
        self.sizes: dict[int, int] = {}
        self.open: set[int] = set()

    def size(self, node: Node, path: tuple[Any, ...]) -> int:
        known = self.sizes.get(id(node))
        if known is not None:
            return known
        if id(node) in self.open:
            raise UnsafeYaml(f"{_line(node)}{key_path(path)}: an alias refers to itself")
        if isinstance(node, ScalarNode):
            self._finite(node, path)
            total = 1
        else:
            self.open.add(id(node))
            total = 1 + sum(self.size(child, where) for child, where in self._children(node, path))
            self.open.discard(id(node))
        if total > MAX_EXPANDED_NODES:
            raise UnsafeYaml(
                f"the document expands to more than {MAX_EXPANDED_NODES:,} values "
                "(aliases repeating aliases?)"
            )
        self.sizes[id(node)] = total
        return total

    def _children(
        self, node: Node, path: tuple[Any, ...]
    ) -> Iterable[tuple[Node, tuple[Any, ...]]]:
        if isinstance(node, SequenceNode):
            for index, child in enumerate(node.value):
                yield child, (*path, index)
        elif isinstance(node, MappingNode):
            seen: dict[tuple[str, str], ScalarNode] = {}
            for key, value in node.value:
                if isinstance(key, ScalarNode) and key.tag != _MERGE:
                    first = seen.setdefault((key.tag, key.value), key)
                    if first is not key:
                        raise UnsafeYaml(
                            f"{_line(key)}{key_path(path)}: duplicate key {key.value!r} "
                            f"(first on line {first.start_mark.line + 1}; YAML keeps only "
                            "the last)"
                        )
                yield key, path
                yield value, (*path, key.value if isinstance(key, ScalarNode) else "?")

    def _finite(self, node: ScalarNode, path: tuple[Any, ...]) -> None:
        if node.tag != _FLOAT:
            return
        try:
            finite = math.isfinite(self.loader.construct_yaml_float(node))
        except ValueError:
            finite = False
        if not finite:
            raise UnsafeYaml(f"{_line(node)}{key_path(path)}: {node.value} is not a finite number")


def _line(node: Node) -> str:
    return f"line {node.start_mark.line + 1}: "


@dataclass(frozen=True)
class Unreadable:
    """Why a YAML file could not become a document (a type of its own: a document may
    itself be a plain string)."""

    message: str


def read_yaml_file(path: Path, max_bytes: int = MAX_YAML_BYTES, *, lenient: bool = False) -> Any:
    """The document of a task file, or `Unreadable` naming the line where it can be: bad
    bytes, a UTF-16/32 file, invalid YAML, YAML `load_yaml` refuses, or more than
    `max_bytes` (read no further). `lenient` reads the text whatever its encoding (bad bytes
    replaced): what a file is, not whether it is well made."""
    try:
        raw, size = read_head(path, max_bytes + 1)
    except OSError as exc:
        return Unreadable(f"cannot read: {exc}")
    if size > max_bytes:
        return Unreadable(
            f"the file is {size:,} bytes, over the limit of {max_bytes:,} (--llm-max-yaml-bytes)"
        )
    wide = wide_encoding(raw[:4])
    if lenient:
        text = raw.decode(wide[1] if wide else "utf-8", "replace").removeprefix("\ufeff")
    elif wide is not None:
        return Unreadable(f"the file is {wide[0]}, not UTF-8: save it as UTF-8")
    else:
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line, message = undecodable(raw, exc)
            return Unreadable(f"line {line}: {message}")
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        return Unreadable(f"{where}not valid YAML: {getattr(exc, 'problem', None) or exc}")
    except UnsafeYaml as exc:
        return Unreadable(str(exc))
