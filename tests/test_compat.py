"""The private pytest, xdist and execnet attributes behind `pytest_llmtool.run.compat`.

Each has a test that fails naming the attribute when an upgrade removes it, and a test that
the function built on it does its job in a real run; without them a feature (per-item work
directories under --basetemp, the concurrency window under xdist, passing SIGTERM on to the
workers) would quietly degrade instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import execnet
import pytest

from pytest_llmtool.run.compat import gateway_pid, item_tmp_path, xdist_pending


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- pytest: config._tmp_path_factory ---------------------------------------------------------


def test_pytest_still_has_config_tmp_path_factory(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfigure()
    factory = getattr(config, "_tmp_path_factory", None)
    assert isinstance(factory, pytest.TempPathFactory), (
        "pytest no longer sets config._tmp_path_factory (a TempPathFactory): "
        "compat.item_tmp_path needs another way to reach --basetemp"
    )


def test_item_tmp_path_makes_fresh_directories_under_basetemp(pytester: pytest.Pytester) -> None:
    basetemp = pytester.path / "base"
    config = pytester.parseconfigure(f"--basetemp={basetemp}")
    first, second = item_tmp_path(config, "demo"), item_tmp_path(config, "demo")
    assert first != second
    for made in (first, second):
        assert made.is_dir() and not any(made.iterdir())
        assert made.parent == basetemp and made.name.startswith("demo")


def test_item_tmp_path_without_the_tmpdir_plugin_is_a_plain_temporary_folder(
    pytester: pytest.Pytester,
) -> None:
    config = pytester.parseconfigure("-p", "no:tmpdir")
    made = item_tmp_path(config, "demo")
    try:
        assert made.is_dir() and made.name.startswith("demo-")
    finally:
        made.rmdir()


# --- xdist: WorkerInteractor.torun ------------------------------------------------------------

WORKER_CONFTEST = """
import json

from pytest_llmtool.run.compat import xdist_pending

def pytest_runtest_call(item):
    interactor = next(
        (p for p in item.config.pluginmanager.get_plugins()
         if type(p).__name__ == "WorkerInteractor"),
        None,
    )
    queue = getattr(interactor, "torun", None)
    record = {
        "index": item.session.items.index(item),
        "interactor": interactor is not None,
        "torun": queue is not None,
        "lock": hasattr(queue, "lock"),
        "pending": xdist_pending(item.config),
    }
    with open(OUT, "a") as out:
        out.write(json.dumps(record) + "\\n")
"""


def _worker_run(pytester: pytest.Pytester) -> list[dict[str, Any]]:
    """Five plain tests on one xdist worker, each recording what the worker's queue holds."""
    out = pytester.path / "worker.jsonl"
    pytester.makeconftest(f"OUT = {str(out)!r}\n" + WORKER_CONFTEST)
    pytester.makepyfile("\n".join(f"def test_{n}(): pass" for n in range(5)))
    # `--dist each` hands the worker every item in one command (`load` sends chunks as it goes).
    result = pytester.runpytest("-n", "1", "--dist", "each", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
    return sorted(_lines(out), key=lambda r: r["index"])


def test_xdist_still_has_worker_interactor_torun(pytester: pytest.Pytester) -> None:
    records = _worker_run(pytester)
    assert len(records) == 5
    for record in records:
        assert record["interactor"], "xdist no longer registers its WorkerInteractor plugin"
        assert record["torun"], (
            "xdist's WorkerInteractor.torun is gone: compat.xdist_pending (the concurrency "
            "window under xdist) needs another way to see the worker's queue"
        )
        assert record["lock"], "xdist's WorkerInteractor.torun.lock() is gone"


def test_xdist_pending_lists_the_items_queued_after_the_next_one(
    pytester: pytest.Pytester,
) -> None:
    # The worker gets all five items at once; while item i runs, item i+1 is already taken
    # off the queue as pytest's `nextitem`, so the queue holds i+2 onwards. (Item 0 may run
    # while the rest are still being queued, so it is left out.)
    records = _worker_run(pytester)
    assert [r["pending"] for r in records[1:]] == [[3, 4], [4], [], []]


def test_xdist_pending_is_none_outside_a_worker(pytester: pytest.Pytester) -> None:
    assert xdist_pending(pytester.parseconfigure()) is None


# --- execnet: gateway._rinfo() ----------------------------------------------------------------


@pytest.fixture
def gateway() -> Iterator[Any]:
    gw = execnet.makegateway("popen")
    yield gw
    gw.exit()


def test_execnet_still_has_gateway_rinfo_with_the_pid(gateway: Any) -> None:
    assert hasattr(gateway, "_rinfo"), (
        "execnet's Gateway._rinfo() is gone: compat.gateway_pid (passing SIGTERM on to "
        "xdist workers) needs another way to learn a worker's pid"
    )
    remote_pid = gateway.remote_exec("import os; channel.send(os.getpid())").receive()
    assert gateway._rinfo().pid == remote_pid != os.getpid()


def test_gateway_pid_is_none_for_a_remote_gateway() -> None:
    for spec in ("ssh=somehost", "popen//via=gw0"):
        node = SimpleNamespace(gateway=SimpleNamespace(spec=execnet.XSpec(spec)))
        assert gateway_pid(node) is None, spec


NODE_CONFTEST = """
import json
import os

from pytest_llmtool.run.compat import gateway_pid

def pytest_testnodeready(node):
    record = {"worker": node.gateway.id, "pid": gateway_pid(node)}
    with open(OUT, "a") as out:
        out.write(json.dumps(record) + "\\n")
"""


def test_gateway_pid_of_real_xdist_workers_is_their_pid(pytester: pytest.Pytester) -> None:
    nodes, seen = pytester.path / "nodes.jsonl", pytester.path / "seen.jsonl"
    pytester.makeconftest(f"OUT = {str(nodes)!r}\n" + NODE_CONFTEST)
    pytester.makepyfile(
        f"""
        import json, os

        def test_record_my_pid():
            with open({str(seen)!r}, "a") as out:
                record = {{"worker": os.environ["PYTEST_XDIST_WORKER"], "pid": os.getpid()}}
                out.write(json.dumps(record) + "\\n")
        """
    )
    pytester.runpytest("-n", "2", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    from_gateways = {r["worker"]: r["pid"] for r in _lines(nodes)}
    assert set(from_gateways) == {"gw0", "gw1"}
    assert len(set(from_gateways.values())) == 2 and os.getpid() not in from_gateways.values()
    (ran,) = _lines(seen)
    assert from_gateways[ran["worker"]] == ran["pid"]
