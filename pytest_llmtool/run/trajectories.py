"""`--llm-trajectories=DIR`: each item's trajectory as ATIF (`agents/atif.py`), written by
the reporting process as the item's result arrives, so a run stopped halfway leaves those of
the items that finished, and a run under xdist writes them all in one place.

The result arrives redacted (`roles.redactor`, the choke point every item report passes
through); the file's text is redacted once more, as every report file is.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest_llmtool
from pytest_llmtool.agents.atif import to_atif
from pytest_llmtool.records import AgentTrace, ItemResult, ModelSetup
from pytest_llmtool.report.redact import Redactor

# The built-in loop's name in a trajectory (a CLI's is its own).
BUILTIN = "pytest-llmtool"
# Of a node id, how much its file name keeps before the digest that tells long ones apart.
NAME_CHARS = 120


def file_name(nodeid: str) -> str:
    """A file name for the item `nodeid`: its safe characters, then a digest of the whole
    id, so that two ids that read alike (`a/b` and `a_b`) never share a file."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", nodeid).strip("._")[:NAME_CHARS]
    digest = hashlib.sha256(nodeid.encode()).hexdigest()[:10]
    return f"{readable}-{digest}.json"


def _prompt(trace: AgentTrace) -> str:
    """The task as the agent was sent it: the trace's first message, when it is the user's."""
    first = trace.messages[0] if trace.messages else None
    return first.text() if first is not None and first.role == "user" else ""


class TrajectoryWriter:
    """Writes `DIR/<item>.json` for every result that has a trace."""

    def __init__(self, directory: Path, redact: Redactor) -> None:
        self.directory = directory
        self.redact = redact

    def write(self, nodeid: str, result: ItemResult, setup: ModelSetup | None) -> Path | None:
        """The item's trajectory file, or None for a result without a trace. Raises OSError
        when it cannot be written."""
        trace = getattr(result, "trace", None)
        if not isinstance(trace, AgentTrace):
            return None
        agent = trace.agent
        document = to_atif(
            trace,
            prompt=_prompt(trace),
            system=setup.system if setup is not None else None,
            agent_name=agent.name if agent is not None else BUILTIN,
            agent_version=(agent.version if agent is not None else pytest_llmtool.__version__)
            or "unknown",
            model_name=result.model,
            session_id=nodeid,
        )
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / file_name(nodeid)
        text = self.redact(json.dumps(document, indent=2, ensure_ascii=False)) + "\n"
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
        return path
