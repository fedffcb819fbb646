"""What one pytest process shares among all its items, whatever their kind.

Kept in `config.stash[STATE_KEY]`: the resolved settings and models, the spend tally, the
SDK clients, the event loop, the judge models, and the markers built from task data.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from pytest_llmtool.agents import AgentError, ModelSpec
from pytest_llmtool.agents.base import UnknownModel
from pytest_llmtool.agents.budget import Budget
from pytest_llmtool.agents.pricing import find_price
from pytest_llmtool.agents.registry import (
    ClientPool,
    ModelRef,
    build_model,
    cost_bound_problem,
    overridden,
    resolve,
)
from pytest_llmtool.agents.replay import CallStore
from pytest_llmtool.run.runtime import Runtime
from pytest_llmtool.sandbox.container.engine import LiveContainers
from pytest_llmtool.sandbox.vfs import BashPool
from pytest_llmtool.settings import Settings

# pytest's own markers (and ours): a category or tag of that name must not act as one.
RESERVED_MARKERS = frozenset(
    {"skip", "skipif", "xfail", "parametrize", "usefixtures", "filterwarnings", "llm"}
)


@dataclass
class RunState:
    settings: Settings
    models: tuple[ModelSpec, ...]
    budget: Budget
    pool: ClientPool
    runtime: Runtime = field(default_factory=Runtime)
    # bashkit interpreters finished tasks gave back (`sandbox/vfs.py`).
    bash_pool: BashPool = field(default_factory=BashPool)
    # Containers started and not yet removed (`sandbox/container/engine.py`): removed at
    # `close`, when an interrupt left them behind.
    containers: LiveContainers = field(default_factory=LiveContainers)
    # On an xdist worker that shares no directory with the controller (`run/hosts.py`): where
    # each `--llm-record` recording also goes.
    forward_recording: Callable[[str, bytes], None] | None = None
    _markers: dict[tuple[str, str], list[pytest.MarkDecorator]] = field(default_factory=dict)
    _named: set[str] = field(default_factory=set)
    _skips: dict[str, pytest.MarkDecorator] = field(default_factory=dict)
    _slots: asyncio.Semaphore | None = None
    _judges: dict[str, ModelSpec] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        settings: Settings,
        budget: Budget,
        forward_recording: Callable[[str, bytes], None] | None = None,
    ) -> RunState:
        pool = ClientPool(
            settings.base_urls,
            settings.retry.call_timeout,
            concurrency=settings.concurrency,
            adaptive=settings.adaptive,
        )
        state = cls(settings, (), budget, pool, forward_recording=forward_recording)
        state.models = tuple(state.build(ref) for ref in settings.models)
        return state

    def build(self, ref: ModelRef) -> ModelSpec:
        """The model `ref` names, as its table entry configures it with the command line's
        values over it (`registry.overridden`); its entry's price wins over `llm_prices`."""
        settings = self.settings
        ref = overridden(ref, settings.params, settings.base_urls)
        return build_model(
            ref,
            price=ref.setup.price or find_price(ref.model_id, settings.prices),
            pool=self.pool,
            policy=settings.retry,
            prompt_cache=settings.prompt_cache,
            record=(
                CallStore(settings.record_dir, self.forward_recording)
                if settings.record_dir
                else None
            ),
            replay=CallStore(settings.replay_dir) if settings.replay_dir else None,
        )

    def judge_named(self, name: str | None) -> ModelSpec | None:
        """A judge model by name; one nobody can call is an infrastructure error on the item."""
        if name is None:
            return None
        if name not in self._judges:
            try:
                ref = resolve(name, self.settings.aliases)
            except UnknownModel as exc:
                raise AgentError(f"judge model: {exc}") from None
            if ref.provider == "offline":
                raise AgentError(f"judge model {name!r}: a judge must be a real model")
            key_missing = ref.key_env and not os.environ.get(ref.key_env)
            if key_missing and self.settings.replay_dir is None:
                raise AgentError(f"judge model {name!r} needs {ref.key_env} in the environment")
            judge = self.build(ref)
            # A scenario's own judge was not among those checked at the start: one the limit
            # cannot bound stops its item before any call, rather than spend past the limit.
            unbounded = cost_bound_problem(judge) if self.settings.max_cost is not None else None
            if unbounded is not None:
                raise AgentError(unbounded)
            self._judges[name] = judge
        return self._judges[name]

    def _named_marker(
        self, name: str, what: str, config: pytest.Config
    ) -> list[pytest.MarkDecorator]:
        """A marker called `name`, so that `-m name` selects, when the name is free.

        A name pytest or another plugin gives a meaning to (`skip`, `xfail`, `timeout`,
        `flaky`, ...) would make a dataset's words act on its items, so it gets no marker of
        its own; `llm(category=...)` / `llm(tag=...)` select those."""
        if not name.isidentifier() or name in RESERVED_MARKERS:
            return []
        if name not in self._named:
            taken = {
                line.split(":", 1)[0].split("(", 1)[0].strip() for line in config.getini("markers")
            }
            if name in taken:
                return []
            config.addinivalue_line("markers", f"{name}: {what} (pytest-llmtool)")
            self._named.add(name)
        return [getattr(pytest.mark, name)]

    def data_markers(
        self, key: str, value: str, config: pytest.Config
    ) -> list[pytest.MarkDecorator]:
        """`llm(<key>=value)` and, when the name is free, a marker named `value` (`-m smoke`).

        Built once per value and shared by its items (large datasets have many items)."""
        if (key, value) not in self._markers:
            self._markers[key, value] = [
                pytest.mark.llm(**{key: value}),
                *self._named_marker(value, f"task {key} (pytest-llmtool)", config),
            ]
        return self._markers[key, value]

    def skip_marker(self, reason: str) -> pytest.MarkDecorator:
        if reason not in self._skips:
            self._skips[reason] = pytest.mark.skip(reason=reason)
        return self._skips[reason]

    def slots(self) -> asyncio.Semaphore:
        """At most `--llm-concurrency` agent loops run at once in this process."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.settings.concurrency)
        return self._slots

    def close(self) -> None:
        try:
            if self.pool.opened:
                self.runtime.run(self.pool.aclose())
        finally:
            self.runtime.close()
            self.containers.remove_all()


STATE_KEY = pytest.StashKey[RunState]()
