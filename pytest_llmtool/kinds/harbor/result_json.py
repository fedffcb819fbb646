"""Harbor's own result files for our Harbor items (`--llm-harbor-jobs=DIR`): a trial's
`result.json` (`TrialResult`, `harbor/models/trial/result.py`) per item under
`DIR/<job>/<trial>/`, and the job's `result.json` (`JobResult`) beside them, so a tool that
reads Harbor's jobs directory reads ours.

Filled honestly: what we do not know stays at Harbor's empty value (`model_usage`, the
trial's full config, the agent's version `unknown`), never made up. `task_checksum` is the
task's digest as Harbor's packager makes it (`load.harbor_digest`, checked against Harbor's
own `Packager`), not Harbor's deprecated directory hash; empty for a task with ignore files.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_llmtool.kinds.harbor.load import harbor_digest
from pytest_llmtool.kinds.harbor.summary import OFFLINE_AGENTS
from pytest_llmtool.records import ExceptionInfo, HarborResult, PhaseTiming

if TYPE_CHECKING:
    from pytest_llmtool.kinds.harbor.task import HarborTask

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_NAMESPACE = uuid.UUID("6f1f4d1e-8d67-4c36-9a55-3f6a3c2b7e10")


def trial_name(result: HarborResult) -> str:
    """`<task>__<8 hex>`, as Harbor names trials (its suffix is random; ours is the node
    id's hash, so a rerun of the same item writes the same directory)."""
    digest = hashlib.sha256(result.nodeid.encode()).hexdigest()[:8]
    return f"{_UNSAFE.sub('-', result.task_id)[:32]}__{digest}"


def _checksum(task_dir: Path) -> str:
    """The task's digest as Harbor's packager makes it, in hex ("" where not reproduced)."""
    found = harbor_digest(task_dir) if task_dir.is_dir() else None
    return "" if found is None else found.removeprefix("sha256:")


def _timing(timing: PhaseTiming | None) -> dict[str, str | None] | None:
    return None if timing is None else timing.model_dump()


def _exception(info: ExceptionInfo | None, fallback: str) -> dict[str, str] | None:
    if info is None:
        return None
    return {
        "exception_type": info.exception_type,
        "exception_message": info.exception_message,
        "exception_traceback": info.exception_traceback,
        "occurred_at": info.occurred_at or fallback,
    }


def _rewards(rewards: dict[str, float] | None) -> dict[str, dict[str, float]] | None:
    return None if rewards is None else {"rewards": dict(rewards)}


def _agent_result(result: HarborResult) -> dict[str, Any] | None:
    found = result.agent_result
    if found is None:
        return None
    usage = {
        model: {k: v for k, v in numbers.items() if v is not None}
        for model, numbers in found.model_usage.items()
    }
    return {
        "n_input_tokens": found.n_input_tokens,
        "n_cache_tokens": found.n_cache_tokens,
        "n_output_tokens": found.n_output_tokens,
        "cost_usd": found.cost_usd,
        "model_usage": usage or None,
    }


def _bounds(result: HarborResult) -> tuple[str | None, str | None]:
    phases = [result.environment_setup, result.agent_setup, result.agent_execution]
    phases += [result.verifier]
    starts = [p.started_at for p in phases if p is not None and p.started_at]
    ends = [p.finished_at for p in phases if p is not None and p.finished_at]
    return (min(starts) if starts else None), (max(ends) if ends else None)


def trial_result(
    result: HarborResult, task_dir: Path, trial_uri: str, source: str | None = None
) -> dict[str, Any]:
    """Harbor's `TrialResult` of one item, as JSON-native data."""
    name = trial_name(result)
    started, finished = _bounds(result)
    now = finished or started or datetime.now(UTC).isoformat()
    model = None if result.agent in OFFLINE_AGENTS else result.model
    return {
        "id": str(uuid.uuid5(_NAMESPACE, result.nodeid)),
        "task_name": result.task_name,
        "trial_name": name,
        "trial_uri": trial_uri,
        "task_id": {"path": str(task_dir)},
        "source": source,
        "task_checksum": _checksum(task_dir),
        "config": {
            "task": {"path": str(task_dir), "source": source},
            "trial_name": name,
            "agent": {"name": result.agent, "model_name": model},
        },
        "agent_info": {
            "name": result.agent,
            "version": "unknown",
            "model_info": None if model is None else {"name": model, "provider": None},
        },
        "agent_result": _agent_result(result),
        "verifier_result": None if result.steps else _rewards(result.rewards),
        "exception_info": _exception(result.exception_info, now),
        "started_at": started,
        "finished_at": finished,
        "environment_setup": _timing(result.environment_setup),
        "agent_setup": _timing(result.agent_setup),
        "agent_execution": _timing(result.agent_execution),
        "verifier": _timing(result.verifier),
        "step_results": [
            {
                "step_name": step.step_name,
                "agent_result": None,
                "verifier_result": _rewards(step.rewards),
                "exception_info": _exception(step.exception_info, now),
                "agent_execution": _timing(step.agent_execution),
                "verifier": _timing(step.verifier),
            }
            for step in result.steps
        ]
        or None,
    }


def _metric(trials: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Harbor's default `mean` metric: a trial without rewards counts 0, and so does a key a
    trial lacks (`harbor/metrics/base.py`)."""
    rewards = [(t["verifier_result"] or {}).get("rewards") for t in trials]
    keys = sorted({k for r in rewards if r for k in r})
    if len(keys) <= 1:
        values = [next(iter(r.values()), 0.0) if r else 0.0 for r in rewards]
        return {"mean": math.fsum(values) / len(values)}
    return {k: math.fsum((r or {}).get(k, 0.0) for r in rewards) / len(rewards) for k in keys}


def job_result(trials: Sequence[dict[str, Any]], job_id: str) -> dict[str, Any]:
    """Harbor's `JobResult` of the trials written: counts, per agent/model/dataset the
    rewards' trials and the mean metric, exceptions, and token and cost totals (None when
    no trial knew them), as `JobStats.increment` counts them."""
    evals: dict[str, dict[str, Any]] = {}
    totals: dict[str, float | None] = dict.fromkeys(
        ("n_input_tokens", "n_cache_tokens", "n_output_tokens", "cost_usd")
    )
    errored = 0
    members: dict[str, list[dict[str, Any]]] = {}
    for t in trials:
        model = (t["agent_info"]["model_info"] or {}).get("name")
        key = f"{t['agent_info']['name']}__" + (f"{model}__" if model else "")
        key += t["source"] or "adhoc"
        members.setdefault(key, []).append(t)
        found = evals.setdefault(
            key, {"n_trials": 0, "n_errors": 0, "reward_stats": {}, "exception_stats": {}}
        )
        rewards = (t["verifier_result"] or {}).get("rewards")
        if rewards is not None:
            found["n_trials"] += 1
            for name, value in rewards.items():
                by_value = found["reward_stats"].setdefault(name, {})
                by_value.setdefault(value, []).append(t["trial_name"])
        if t["exception_info"] is not None:
            kind = t["exception_info"]["exception_type"]
            found["exception_stats"].setdefault(kind, []).append(t["trial_name"])
            found["n_errors"] += 1
            errored += 1
        for field, value in (t["agent_result"] or {}).items():
            if field in totals and value is not None:
                totals[field] = (totals[field] or 0) + value
    for key, found in evals.items():
        found["metrics"] = [_metric(members[key])]
    now = datetime.now(UTC).isoformat()
    starts = [t["started_at"] for t in trials if t["started_at"]]
    return {
        "id": job_id,
        "started_at": min(starts) if starts else now,
        "updated_at": now,
        "finished_at": now,
        "n_total_trials": len(trials),
        "stats": {
            "n_completed_trials": len(trials),
            "n_errored_trials": errored,
            "evals": evals,
            **totals,
        },
        "trial_results": [],
    }


def _write(path: Path, data: dict[str, Any]) -> None:
    """Whole or not at all: a reader (another worker) never sees half a file."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)


# This process's job name per run id (`_job_name`).
_JOBS: dict[str, str] = {}


def _job_name(root: Path) -> str:
    """This run's job: Harbor's timestamp name, the same in every xdist worker of the run
    (the first to ask records it under the run's id), and per process in a serial run."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    if run in _JOBS:
        return _JOBS[run]
    marks = root / ".llmtool-runs"
    marks.mkdir(parents=True, exist_ok=True)
    with (marks / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        mark = marks / run
        if not mark.is_file():
            stamp = datetime.now().strftime("%Y-%m-%d__%H-%M-%S")
            name, n = stamp, 1
            while (root / name).exists():
                n += 1
                name = f"{stamp}-{n}"
            (root / name).mkdir()
            mark.write_text(name, encoding="utf-8")
        _JOBS[run] = mark.read_text(encoding="utf-8").strip()
    return _JOBS[run]


class JobWriter:
    """Writes one run's Harbor job under `root`: each trial's `result.json` as its item
    ends (in the process that ran it), and the job's `result.json` made again from every
    trial written so far, under a lock, so it is whole and current after the last item."""

    def __init__(self, root: Path, job_name: str | None = None) -> None:
        self.root = root
        self.job = root / (job_name or _job_name(root))

    def write_trial(self, result: HarborResult, task: HarborTask | None = None) -> Path:
        """Write the item's trial `result.json` and the job's; returns the trial's folder."""
        folder = self.job / trial_name(result)
        folder.mkdir(parents=True, exist_ok=True)
        task_dir = task.path if task is not None else Path(result.nodeid.split("::", 1)[0]).parent
        source = task.dataset if task is not None else None
        _write(
            folder / "result.json",
            trial_result(result, task_dir, folder.resolve().as_uri(), source),
        )
        with (self.job / ".llmtool-job.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            trials = [
                json.loads(path.read_text(encoding="utf-8"))
                for path in sorted(self.job.glob("*/result.json"))
            ]
            job_id = str(uuid.uuid5(_NAMESPACE, str(self.job.resolve())))
            _write(self.job / "result.json", job_result(trials, job_id))
        return folder
