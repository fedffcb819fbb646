"""What a result was made of, as a fingerprint journaled with it: the task as loaded (its
reference solution and the files and folders its run reads besides its own file included)
and the model as the run resolves it. `--llm-resume` keeps a journaled result only when its
item's fingerprint is the same now (`run/resume.py`): an edited check, prompt, template or
temperature runs the item again.

A task's part is made once, in the pass over the selected items that dumps each task for the
dataset's fingerprint (`roles.fingerprint`), and only when the run journals or resumes; a
folder shared by several tasks is read once per pass. Nothing secret goes in: base URLs lose
their `user:password@`, and API keys are never read.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pytest_llmtool.agents.models import identity
from pytest_llmtool.agents.registry import ModelRef, overridden, resolve
from pytest_llmtool.kinds import Kind
from pytest_llmtool.settings import Settings

SIZE = 16  # bytes of blake2b: 32 hex digits


def _tree(path: Path) -> str:
    """A digest of a file's or folder's content: each file's relative name, executable bit
    and bytes, each symbolic link's target (not followed). What cannot be read is named with
    its error, so it differs from anything readable."""
    digest = hashlib.blake2b(digest_size=SIZE)

    def add(where: Path, name: str) -> None:
        digest.update(f"\0{name}\0".encode("utf-8", "surrogateescape"))
        try:
            if where.is_symlink():
                digest.update(b"link:" + os.fsencode(os.readlink(where)))
            elif where.is_file():
                digest.update(b"x" if os.access(where, os.X_OK) else b"-")
                with where.open("rb") as stream:
                    while chunk := stream.read(1 << 20):
                        digest.update(chunk)
            elif where.is_dir():
                digest.update(b"dir")
            else:
                digest.update(b"missing")
        except OSError as exc:
            digest.update(f"error:{exc.strerror}".encode())

    path = path.resolve()  # the folder or file itself is followed, links below it are not
    add(path, ".")
    if path.is_dir():
        for folder, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted([*dirs, *files]):
                where = Path(folder, name)
                add(where, where.relative_to(path).as_posix())
    return digest.hexdigest()


class TaskDigests:
    """Each task's digest, for one pass over the selected items (folders read once)."""

    def __init__(self) -> None:
        self._trees: dict[Path, str] = {}

    def digest(self, kind: Kind[Any, Any], work: Any, content: str) -> str:
        """The task's digest, from `content` (its dump, less the solution) and the rest.

        The solution goes in as its `repr` (a fifth of a second dump's cost): fingerprints
        are only compared within one version of the plugin (`run_identity`)."""
        solution = getattr(work, "solution", None)
        digest = hashlib.blake2b(f"{content}\0{solution!r}".encode(), digest_size=SIZE)
        for source in kind.sources(work):
            tree = self._trees.get(source)
            if tree is None:
                tree = self._trees[source] = _tree(source)
            digest.update(f"\0{source}\0{tree}".encode("utf-8", "surrogateescape"))
        return digest.hexdigest()


def _identity(settings: Settings, ref: ModelRef) -> str | None:
    """The digest of what `ref` resolved to (`models.identity`: protocol, model id, endpoint
    without credentials, parameters, client, header names); None for a model not called."""
    if ref.provider in ("offline", "external"):
        return None
    return identity(ref.name, overridden(ref, settings.params, settings.base_urls).setup).digest


def model_digests(settings: Settings) -> dict[str, str]:
    """Per `--llm-model` name, a digest of what decides its answers and verdicts: its
    identity (its table entry with the command line over it), recordings replayed, the
    external agent's command, and the judges' identities and how they are asked."""
    judges = [
        _identity(settings, resolve(name, settings.aliases)) for name in settings.judge_models
    ]
    shared = {
        # The command line's parameters, as every run before the model table digested them.
        "params": settings.params.model_dump(),
        "replay": None if settings.replay_dir is None else str(settings.replay_dir),
        "judges": judges,
        "judge_samples": settings.judge_samples,
        "judge_min_agreement": settings.judge_min_agreement,
    }
    found = {}
    for ref in settings.models:
        made_of = {
            **shared,
            "provider": ref.provider,
            "model_id": ref.model_id,
            "identity": _identity(settings, ref),
            "agent_cmd": settings.agent_cmd if ref.provider == "external" else None,
            # An agent CLI's run (absent for the built-in loop: its digests stay as they were).
            **({"agent": ref.agent} if ref.agent else {}),
        }
        text = json.dumps(made_of, sort_keys=True, ensure_ascii=False)
        found[ref.name] = hashlib.blake2b(text.encode(), digest_size=SIZE).hexdigest()
    return found
