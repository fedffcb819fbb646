"""Record and replay at the model-call layer, not HTTP.

Each call is stored as one JSON file whose name is a hash of everything that decides the
answer: the model, the system prompt, the messages, the tools and the trial index (so
repeated trials stay independent). Only the request's content and the neutral reply are
stored, never headers or keys. Replaying needs neither network nor key; a call that was
never recorded is an error on that item naming the task.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from pytest_llmtool.agents.base import Agent, AgentError, ChatRequest, ChatResponse


class ReplayMiss(AgentError):
    pass


class ReplayCorrupt(AgentError):
    """A recording that exists but cannot be read back: truncated, edited, or not ours."""


def _safe(part: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in part)


@dataclass(frozen=True)
class CallStore:
    directory: Path
    # An xdist worker on another host (`run/hosts.py`) hands each recording, by its path relative
    # to `directory`, to the controller, which writes it into its own record directory.
    forward: Callable[[str, bytes], None] | None = None

    @staticmethod
    def key(model: str, request: ChatRequest, trial: int) -> str:
        payload = {"model": model, "trial": trial, **request.model_dump(mode="json")}
        canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def path(self, model: str, task_id: str, key: str) -> Path:
        return self.directory / _safe(model) / _safe(task_id) / f"{key[:24]}.json"

    def save(
        self, model: str, task_id: str, trial: int, request: ChatRequest, response: ChatResponse
    ) -> None:
        key = self.key(model, request, trial)
        path = self.path(model, task_id, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "key": key,
            "model": model,
            "task_id": task_id,
            "trial": trial,
            "call": sum(1 for m in request.messages if m.role == "assistant") + 1,
            "response": response.model_dump(mode="json"),
        }
        data = json.dumps(record, indent=1).encode()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        if self.forward is not None:
            self.forward(path.relative_to(self.directory).as_posix(), data)

    def load(self, model: str, task_id: str, trial: int, request: ChatRequest) -> ChatResponse:
        key = self.key(model, request, trial)
        path = self.path(model, task_id, key)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            call = sum(1 for m in request.messages if m.role == "assistant") + 1
            raise ReplayMiss(
                f"no recording for task {task_id!r} ({model}, trial {trial}, call {call}) in "
                f"{self.directory}: the conversation differs from the recorded one"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ReplayCorrupt(f"recording {path} cannot be read: {exc}") from None
        return _parse_recording(path, text)


def _parse_recording(path: Path, text: str) -> ChatResponse:
    """The response a recording holds; a damaged one is an error on the item naming the file."""
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise ReplayCorrupt(f"recording {path} is not valid JSON: {exc}") from None
    if not isinstance(record, dict) or "response" not in record:
        raise ReplayCorrupt(f"recording {path} has no `response` object") from None
    try:
        return ChatResponse.model_validate(record["response"])
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ReplayCorrupt(
            f"recording {path} has a malformed response: {where}: {first['msg']}{more}"
        ) from None


@dataclass(frozen=True)
class RecordingAgent:
    inner: Agent
    store: CallStore
    model: str
    task_id: str
    trial: int

    async def chat(self, request: ChatRequest) -> ChatResponse:
        response = await self.inner.chat(request)
        self.store.save(self.model, self.task_id, self.trial, request, response)
        return response


@dataclass(frozen=True)
class ReplayAgent:
    store: CallStore
    model: str
    task_id: str
    trial: int

    async def chat(self, request: ChatRequest) -> ChatResponse:
        return self.store.load(self.model, self.task_id, self.trial, request)
