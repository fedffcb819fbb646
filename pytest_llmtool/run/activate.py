"""Waking the plugin: settings, the run's state, the kinds and writers, and the roles.

`plugin.py` calls `activate` once per process, when the run asks for the plugin or at the
first file that may be an eval file. The roles (`roles.py`) then run the items and report
them; the writers (`report/`) say what happened. Under xdist, `hosts.py` carries the spend,
recordings and artifacts between the controller and its workers, wherever they run. Every
process also turns SIGTERM into Ctrl-C (`signals.py`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from pytest_llmtool.agents.budget import Budget
from pytest_llmtool.agents.registry import cost_bound_problem, resolve
from pytest_llmtool.history import HistoryWriter
from pytest_llmtool.history.gate import GATE_KEY, RegressionGate, Threshold
from pytest_llmtool.kinds import Recognition
from pytest_llmtool.report import (
    JsonWriter,
    MarkdownWriter,
    StepSummaryWriter,
    TerminalWriter,
    Writer,
)
from pytest_llmtool.run.compact import SHARING_KEY, ReportSharing
from pytest_llmtool.run.early_stop import install as install_early_stop
from pytest_llmtool.run.explain import EXPLAIN_KEY, CollectExplainer
from pytest_llmtool.run.heap import thaw
from pytest_llmtool.run.hosts import HostsController, HostsWorker
from pytest_llmtool.run.items import LlmFile
from pytest_llmtool.run.outputs import claim as claim_outputs
from pytest_llmtool.run.resume import install as install_resume
from pytest_llmtool.run.roles import (
    ERROR_ATTR,
    KINDS_KEY,
    RESULT_ATTR,
    WRITERS_KEY,
    Controller,
    Runner,
    redactor,
)
from pytest_llmtool.run.signals import TermAsInterrupt
from pytest_llmtool.run.state import STATE_KEY, RunState
from pytest_llmtool.sandbox.container.reaper import reap
from pytest_llmtool.settings import Settings


def builtin_writers(config: pytest.Config) -> list[Writer]:
    settings = config.stash[STATE_KEY].settings
    history = settings.history
    gaps: list[Writer] = []
    if settings.gaps is not None:  # imported only then: the gap report's replay is large
        from pytest_llmtool.gaps.writer import GapsWriter

        # Recorded node ids name datasets relative to the rootdir.
        bases = [config.rootpath, config.invocation_params.dir]
        gaps.append(GapsWriter(settings.gaps, settings.gaps_from, bases=bases))
    inspect: list[Writer] = []
    if settings.inspect_log is not None:
        from pytest_llmtool.report.inspect_log import InspectLogWriter

        inspect.append(InspectLogWriter(settings.inspect_log, redactor(config)))
    return [
        TerminalWriter(),
        JsonWriter(),
        *([HistoryWriter(history)] if history is not None else []),
        MarkdownWriter(),
        StepSummaryWriter(),
        *gaps,
        *inspect,
    ]


def activate(config: pytest.Config) -> None:
    """Build the run's state and register the roles of this process."""
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    worker = HostsWorker(workerinput) if workerinput is not None else None
    if worker is not None:
        worker.check_versions()  # before anything else: a refused worker runs nothing
    try:
        settings = Settings.from_config(config)
    except pytest.UsageError as exc:
        if worker is None:
            raise
        # Another host's environment or ini file (say, no API key there): the controller,
        # which accepted the same options, says so and stops the run.
        worker.refuse(str(exc))
    budget = Budget(settings.max_cost)
    forward = worker.forward_recording if worker and not worker.shares_files else None
    state = config.stash[STATE_KEY] = RunState.create(settings, budget, forward)
    if workerinput is not None and workerinput.get("testrunuid"):  # one run id for all workers
        state.containers.run_id = str(workerinput["testrunuid"])[:12]
    if settings.max_cost is not None:  # a limit the run could not enforce fails it at once
        judges = [state.build(resolve(name, settings.aliases)) for name in settings.judge_models]
        for problem in filter(None, map(cost_bound_problem, [*state.models, *judges])):
            raise pytest.UsageError(problem)
    config.stash[KINDS_KEY] = [
        k for ks in config.hook.pytest_llmtool_kinds(config=config) for k in ks
    ]
    config.stash[WRITERS_KEY] = [
        w for ws in config.hook.pytest_llmtool_writers(config=config) for w in ws
    ]
    controller = None if workerinput else Controller(config)
    if controller is not None:  # before anything starts: a path it cannot write, a held one
        claim_outputs(config, settings)
        reap()  # before any worker starts: containers a killed run left
    # Before anything starts: a journal that cannot be resumed is a usage error.
    install_resume(config, settings, controller)
    install_early_stop(config, settings, config.stash[KINDS_KEY], (RESULT_ATTR, ERROR_ATTR))
    config.pluginmanager.register(Runner(), "llmtool-runner")
    if worker is not None:
        worker.attach(budget)
        config.pluginmanager.register(worker, "llmtool-hosts")
    else:
        config.pluginmanager.register(HostsController(config, budget), "llmtool-hosts")
    if settings.explain_collect:  # what was collected and why, and nothing run
        config.option.collectonly = True
        explainer = config.stash[EXPLAIN_KEY] = CollectExplainer(config)
        config.pluginmanager.register(explainer, "llmtool-explain-collect")
    signals = TermAsInterrupt()
    config.pluginmanager.register(signals, "llmtool-signals")
    signals.install()
    # Restored by a cleanup, which runs after every pytest_unconfigure: until then SIGTERM's
    # default action could cut the cancelling of runs in flight short.
    config.add_cleanup(signals.uninstall)
    # Woken in pytest_configure, this runs after pytest's own last collections (cleanups
    # run last in, first out, and pytest's unraisable-exception plugin adds its cleanup in
    # pytest_configure after ours): those then skip what the run froze.
    config.add_cleanup(functools.partial(thaw, config))
    if config.pluginmanager.hasplugin("html") and config.getoption("htmlpath", None):
        from pytest_llmtool.run.html import HtmlItems, HtmlReport

        config.pluginmanager.register(HtmlItems(), "llmtool-html-items")
        if controller is not None:
            config.pluginmanager.register(HtmlReport(controller), "llmtool-html")
    if controller is not None:
        config.pluginmanager.register(controller, "llmtool-controller")
        sharing = config.stash[SHARING_KEY] = ReportSharing()
        config.pluginmanager.register(sharing, "llmtool-report-sharing")
        if settings.judge_labels is not None or settings.judge_min_agreement:
            _register_calibration(config, settings)
        if settings.fail_on_regression and settings.baseline is None:
            raise pytest.UsageError("--llm-fail-on-regression needs --llm-baseline=REF")
        if settings.baseline is not None or settings.fail_under:
            gate = RegressionGate(
                settings.baseline,
                settings.history,
                settings.fail_on_regression,
                settings.allow_missing_baseline,
                [Threshold.parse(text, settings.trials) for text in settings.fail_under],
                settings.allow_model_change,
            )
            config.pluginmanager.register(gate, "llmtool-gate")
            config.stash[GATE_KEY] = gate


def _register_calibration(config: pytest.Config, settings: Settings) -> None:
    """`--llm-judge-labels`: the judge checked against people's labels at the session's end."""
    from pytest_llmtool.history.calibrate import CalibrationCheck, parse_gate

    if settings.judge_labels is None:
        raise pytest.UsageError("--llm-judge-min-agreement needs --llm-judge-labels=PATH")
    if not settings.judge_models:
        raise pytest.UsageError("--llm-judge-labels needs --llm-judge-model=NAMES")
    try:
        gate = parse_gate(settings.judge_min_agreement) if settings.judge_min_agreement else None
    except ValueError as exc:
        raise pytest.UsageError(f"--llm-judge-min-agreement: {exc}") from None
    check = CalibrationCheck(settings.judge_labels, gate, config.stash[STATE_KEY])
    config.pluginmanager.register(check, "llmtool-judge-calibration")


def collect_file(parent: pytest.Collector, file_path: Path) -> pytest.File | None:
    config = parent.config
    state = config.stash[STATE_KEY]
    explainer = config.stash.get(EXPLAIN_KEY, None)
    verdicts: list[tuple[str, Recognition]] = []
    taken = None
    for kind in config.stash[KINDS_KEY]:
        found = kind.recognition(file_path, state)
        if found is not None:
            verdicts.append((kind.name, found))
            if found.taken:
                taken = LlmFile.from_parent(parent, path=file_path, kind=kind)
                break
    if explainer is not None:
        explainer.record(file_path, verdicts, parent.session)
    return taken
