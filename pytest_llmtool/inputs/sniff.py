"""Whether a file may be an eval file, from its name and first bytes, without the plugin.

The plugin is loaded by every pytest run in its environment; most never collect an eval
file. It wakes (imports the kinds, builds the run's state) at the first file that passes
this test, so an unrelated suite pays nothing. The test is a superset of what the built-in
kinds recognise: a file it lets through may still be no eval file (a kind says so), but a
file it refuses is one no built-in kind would take.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from pytest_llmtool.inputs.lines import MAX_YAML_BYTES, read_head
from pytest_llmtool.inputs.untrusted import wide_encoding

# A dataset's task lines name a prompt near the top, and a complete task (what makes a file
# no pattern names a dataset) its expectations too, unless its first line is longer than the
# probe; scenario and optimization files have a top-level `task:` or `optimization:` key.
_JSONL_PROBE = 1 << 20
_JSONL_SHAPE = b'"prompt"'
_JSONL_COMPLETE = b'"expectations"'
_YAML_SHAPE = re.compile(rb"^(?:\xef\xbb\xbf)?(?:task|optimization)\s*:", re.MULTILINE)


def _matches(path: Path, patterns: Sequence[str]) -> bool:
    return any(path.match(p) for p in patterns)


def may_be_eval_file(path: Path, dataset_patterns: Sequence[str]) -> bool:
    """True unless `path` is certainly no dataset, scenario, optimization or Harbor task."""
    if path.name in ("task.toml", "dataset.toml"):  # Harbor's: the kind reads the folder
        return True
    suffix = path.suffix
    if suffix == ".jsonl":
        named = _matches(path, dataset_patterns)
        if named and path.name.endswith("solutions.jsonl"):  # a bash kind's reference solutions
            return True
        try:
            with path.open("rb") as stream:
                head = stream.read(_JSONL_PROBE)
        except OSError:
            return False
        if wide_encoding(head[:4]) is not None:  # an item that says to save it as UTF-8
            return True
        if _JSONL_SHAPE not in head:
            return False
        return named or _JSONL_COMPLETE in head or len(head) == _JSONL_PROBE
    if suffix in (".yaml", ".yml"):
        # Named by a pattern or not, a YAML kind's file has its key (or is too large to tell:
        # one a pattern names is then an error item saying so).
        try:
            raw, size = read_head(path, MAX_YAML_BYTES)
        except OSError:
            return False
        shaped = wide_encoding(raw[:4]) is not None or bool(_YAML_SHAPE.search(raw))
        return shaped or size > MAX_YAML_BYTES
    return False
