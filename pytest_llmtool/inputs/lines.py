"""Files we do not control, read in bounded pieces: never more than a cap held in memory.

A dataset line is parsed whole; a 200 MB line once took 14 s and 866 MB to become a task.
Lines are read in pieces of at most the cap: a longer one is skipped to its end, counted,
and reported by its size instead. A task file is read up to its cap, and no further.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

MiB = 1 << 20
# The longest line a dataset may hold (`--llm-max-line-bytes`): bashkit-eval's longest is
# some 20 KiB.
MAX_LINE_BYTES = 16 * MiB
# The largest scenario or optimization file (`--llm-max-yaml-bytes`): they hold some KiB.
MAX_YAML_BYTES = 4 * MiB
# How much of an oversized line is read at once while it is skipped.
_SKIP_CHUNK = MiB


class Oversized(NamedTuple):
    """A line longer than the cap: its size in bytes (its newline not counted)."""

    size: int


def bounded_lines(stream: BinaryIO, limit: int) -> Iterator[tuple[int, bytes | Oversized]]:
    """(1-based line number, the line's bytes or `Oversized`) for every line of `stream`."""
    lineno = 0
    while True:
        raw = stream.readline(limit + 1)
        if not raw:
            return
        lineno += 1
        body = raw[:-1] if raw.endswith(b"\n") else raw
        if len(body) <= limit:
            yield lineno, raw
            continue
        size = len(raw)
        while not raw.endswith(b"\n"):
            raw = stream.readline(_SKIP_CHUNK)
            if not raw:
                break
            size += len(raw)
        yield lineno, Oversized(size - 1 if raw.endswith(b"\n") else size)


def read_head(path: Path, limit: int) -> tuple[bytes, int]:
    """The first `limit` bytes of the file, and its whole size. Raises OSError."""
    with path.open("rb") as stream:
        head = stream.read(limit)
        size = os.fstat(stream.fileno()).st_size
    return head, max(size, len(head))
