"""`--llm-max-cost`: once the run has spent the limit, no new task starts.

Under xdist each process writes what it has spent to its own file in a directory the
controller hands to every worker, so every process sees the whole run's spend.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


class Budget:
    def __init__(self, limit: float | None, directory: Path | None, process: str) -> None:
        self.limit = limit
        self.directory = directory
        self.process = process
        self._own = 0.0
        self._lock = threading.Lock()

    def add(self, cost: float) -> None:
        with self._lock:
            self._own += cost
            if self.directory is not None:
                path = self.directory / f"spent-{self.process}"
                tmp = path.with_suffix(".tmp")
                tmp.write_text(repr(self._own), encoding="utf-8")
                os.replace(tmp, path)

    def spent(self) -> float:
        if self.directory is None:
            return self._own
        total = 0.0
        for path in self.directory.glob("spent-*"):
            try:
                total += float(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
        return max(total, self._own)

    def exhausted_reason(self) -> str | None:
        if self.limit is None:
            return None
        spent = self.spent()
        if spent >= self.limit:
            return f"--llm-max-cost reached: ${spent:.4f} spent of ${self.limit:.4f}"
        return None
