"""A Harbor verifier's rewards, read as Harbor 0.25 reads them (`harbor/verifier/verifier.py`),
and what decides an item: pure functions, no container.

`/logs/verifier/reward.json` wins when present (an object: key -> finite number), else
`reward.txt` (one float). A missing, empty, unparsable or non-finite reward is a graded
failure under Harbor's error names (`RewardFileNotFoundError`, `RewardFileEmptyError`,
`VerifierOutputParseError`), never an infrastructure error.

One departure, on purpose: Harbor rejects a reward.json holding anything but numbers, and
FormulaCode's own file (datasmith's template) holds booleans, nulls, strings and nested
blocks beside its numbers. Here a JSON object whose values are not all numbers keeps its
numbers and booleans (as 1.0 and 0.0, as Harbor's own check lets booleans through) as rewards
and everything else, verbatim, as `details`; a non-finite number still rejects the whole file,
as Harbor does. A key that decides an item and sits in `details` fails it, saying so.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pytest_llmtool.kinds.harbor.task import HarborTask
    from pytest_llmtool.settings import Settings

# A reward file larger than this is refused unread (FormulaCode's, the largest known, holds
# some KiB of benchmark timings).
MAX_REWARD_BYTES = 4 << 20
# task.toml `[metadata]` keys (Harbor ignores metadata) that set one task's decision.
THRESHOLD_KEY = "llmtool_threshold"
REWARD_KEY = "llmtool_reward_key"
DEFAULT_REWARD_KEY = "reward"
DEFAULT_THRESHOLD = 1.0

Source = Literal["reward.json", "reward.txt"]


@dataclass(frozen=True)
class Rewards:
    """What the verifier left: `rewards` (None when it left none usable, `error` saying why
    as `ErrorName: message`), which file they came from, and reward.json's values that are
    not numbers."""

    rewards: dict[str, float] | None
    source: Source | None
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def error_type(self) -> str | None:
        """Harbor's exception name of `error` (`RewardFileEmptyError`...), or None."""
        return None if self.error is None else self.error.partition(":")[0]


def _fail(source: Source | None, name: str, message: str) -> Rewards:
    return Rewards(None, source, f"{name}: {message}")


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def _plain(value: Any) -> Any:
    """`value` as JSON can hold it: a non-finite float inside a detail becomes its text."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _from_json(raw: bytes) -> Rewards:
    source: Source = "reward.json"
    if not raw:
        return _fail(source, "RewardFileEmptyError", "reward.json is empty")
    if len(raw) > MAX_REWARD_BYTES:
        return _fail(
            source,
            "VerifierOutputParseError",
            f"reward.json is larger than {MAX_REWARD_BYTES} bytes",
        )
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        return _fail(source, "VerifierOutputParseError", f"reward.json is not JSON ({exc})")
    if not isinstance(data, dict):
        return _fail(
            source,
            "VerifierOutputParseError",
            f"reward.json holds a {type(data).__name__}, not an object of rewards: "
            f"{json.dumps(_plain(data))[:80]}",
        )
    rewards: dict[str, float] = {}
    details: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, (bool, int, float)):
            if not _finite(value):
                return _fail(
                    source, "VerifierOutputParseError", f"non-finite reward {key!r}: {value!r}"
                )
            rewards[key] = float(value)
        else:
            details[key] = _plain(value)
    return Rewards(rewards, source, None, details)


def _from_text(raw: bytes) -> Rewards:
    source: Source = "reward.txt"
    if not raw:
        return _fail(source, "RewardFileEmptyError", "reward.txt is empty")
    text = raw[:80].decode("utf-8", "replace")
    try:
        if len(raw) > MAX_REWARD_BYTES:
            raise ValueError(raw)
        value = float(raw.decode("utf-8"))
    except ValueError:
        return _fail(source, "VerifierOutputParseError", f"reward.txt is not one number: {text!r}")
    if not math.isfinite(value):
        return _fail(
            source, "VerifierOutputParseError", f"non-finite reward in reward.txt: {text!r}"
        )
    return Rewards({"reward": value}, source)


def read_rewards(reward_json: bytes | None, reward_txt: bytes | None) -> Rewards:
    """The rewards from `/logs/verifier/reward.json` and `reward.txt` (None: the file is
    absent). reward.json wins whenever it exists, even empty, as in Harbor."""
    if reward_json is not None:
        return _from_json(reward_json)
    if reward_txt is not None:
        return _from_text(reward_txt)
    return _fail(
        None, "RewardFileNotFoundError", "the verifier wrote neither reward.json nor reward.txt"
    )


def roll_up(
    strategy: Literal["mean", "final"] | None, steps: Sequence[Mapping[str, float] | None]
) -> dict[str, float] | None:
    """A multi-step trial's rewards from its steps' (None: a step without a verifier result),
    as Harbor's `_select_multi_step_reward`: `final` is the last step's verbatim; `mean` (the
    default) the per-key mean over the steps with a result, a key a step lacks counting 0;
    None when no step gave one."""
    if not steps:
        return None
    if strategy == "final":
        last = steps[-1]
        return None if last is None else dict(last)
    valid = [step for step in steps if step is not None]
    keys = sorted({key for step in valid for key in step})
    if not keys:
        return None
    return {key: math.fsum(step.get(key, 0.0) for step in valid) / len(valid) for key in keys}


def min_reward_failure(
    rewards: Mapping[str, float] | None, min_reward: float | Mapping[str, float] | None
) -> str | None:
    """Why a step's rewards stop the steps after it (`key=value below min_reward m`), or None:
    a plain number is the bound of `reward`; a key missing counts as -inf, as in Harbor."""
    if min_reward is None:
        return None
    bounds = {"reward": min_reward} if isinstance(min_reward, (int, float)) else min_reward
    for key, bound in bounds.items():
        actual = rewards.get(key, -math.inf) if rewards else -math.inf
        if actual < bound:
            return f"{key}={actual:g} below min_reward {bound:g}"
    return None


def below_min_reward(
    rewards: Mapping[str, float] | None, min_reward: float | Mapping[str, float] | None
) -> bool:
    """Whether a step's rewards stop the remaining steps (`min_reward_failure`)."""
    return min_reward_failure(rewards, min_reward) is not None


def task_decision(
    metadata: Mapping[str, Any], threshold: float = DEFAULT_THRESHOLD
) -> tuple[str, float]:
    """(reward key, threshold) of a task: its `[metadata]` `llmtool_reward_key` and
    `llmtool_threshold` (checked when it loads), else `reward` and `threshold` (the run's
    `--llm-reward-threshold`, 1.0 by default)."""
    own = metadata.get(THRESHOLD_KEY)
    return str(metadata.get(REWARD_KEY, DEFAULT_REWARD_KEY)), float(
        threshold if own is None else own
    )


def decision(task: HarborTask, settings: Settings) -> tuple[str, float]:
    """`task_decision` of a loaded task under the run's settings."""
    return task_decision(task.config.metadata, settings.reward_threshold)


def metadata_problems(metadata: Mapping[str, Any]) -> list[str]:
    """What is wrong with a task's decision keys in `[metadata]`."""
    problems = []
    key = metadata.get(REWARD_KEY)
    if key is not None and (not isinstance(key, str) or not key.strip()):
        problems.append(f"[metadata].{REWARD_KEY}: expected the name of a reward, got {key!r}")
    own = metadata.get(THRESHOLD_KEY)
    if own is not None and (
        isinstance(own, bool) or not isinstance(own, (int, float)) or not math.isfinite(own)
    ):
        problems.append(f"[metadata].{THRESHOLD_KEY}: expected a finite number, got {own!r}")
    return problems
