"""Optimization tasks attacked: task files naming host paths, agents rewriting the harness or
breaking their own measurement, and the shared benchmark lock (issue 18)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import socket
import stat
from pathlib import Path

import pytest
from helpers import (
    read_report,
    schema_errors,
    task,
    write_agent,
    write_project,
    write_task,
)

from pytest_llmtool.kinds.optimization import harness
from pytest_llmtool.kinds.optimization.load import load_task
from pytest_llmtool.kinds.optimization.run import (
    LOCK_NAME,
    Copy,
    _read_times,
    host_lock,
    lock_directory,
)
from pytest_llmtool.sandbox import SandboxError

ASV_BENCH = {"command": "true", "format": "asv", "output": "x", "rounds": 2}


SUMMARY_CMD = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest tests -q -p no:cacheprovider"


@pytest.fixture
def victim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Host files outside the task's directory, which no task may read or remove."""
    folder = tmp_path_factory.mktemp("victim")
    (folder / "precious.json").write_text('{"version": 2}')
    return folder


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("asv", "../../victim/*.json", "optimization.benchmarks.output: * has a `..` part*"),
        ("asv", "/tmp/*/*.json", "optimization.benchmarks.output: * is an absolute path*"),
        ("plain", "../../x.json", "optimization.benchmarks.output: * has a `..` part*"),
        ("tests", "../junit.xml", "optimization.tests.output: * has a `..` part*"),
        ("harness", "../bench.py", "optimization.harness[[]0]: * has a `..` part*"),
        ("harness", "nowhere.py", "optimization.harness[[]0]: 'nowhere.py' is not in the project*"),
        ("harness", "./", "optimization.harness[[]0]: './' names the whole project*"),
    ],
)
def test_paths_leading_out_of_the_copy_are_refused_at_load(
    pytester: pytest.Pytester, victim: Path, key: str, value: str, message: str
) -> None:
    write_project(pytester.path)
    overrides: dict[str, object] = {}
    if key in ("asv", "plain"):
        overrides["benchmarks"] = {**ASV_BENCH, "format": key, "output": value}
    elif key == "tests":
        overrides["tests"] = {"command": "true", "format": "junit", "output": value}
    else:
        overrides["harness"] = [value]
    write_task(pytester.path, task(**overrides))
    result = pytester.runpytest("--llm-model=nop")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*task.yaml: {message}"])
    assert (victim / "precious.json").exists()


def test_a_link_leading_out_of_the_project_is_refused(
    pytester: pytest.Pytester, victim: Path
) -> None:
    write_project(pytester.path)
    (pytester.path / "project" / "benches" / "out").symlink_to(victim)
    write_task(pytester.path, task())
    result = pytester.runpytest("--llm-model=nop")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*optimization.project: benches/out is a symbolic link leading out of the project*"]
    )


@pytest.mark.parametrize("special", ["fifo", "socket"])
def test_a_fifo_or_socket_in_the_project_is_named_once(
    pytester: pytest.Pytester, special: str
) -> None:
    write_project(pytester.path)
    path = pytester.path / "project" / "pkg" / "pipe"
    if special == "fifo":
        os.mkfifo(path)
    else:
        sock = socket.socket(socket.AF_UNIX)
        here = os.getcwd()
        os.chdir(path.parent)  # a relative name: deep temporary paths exceed AF_UNIX's limit
        try:
            sock.bind(path.name)
        finally:
            os.chdir(here)
            sock.close()
    write_task(pytester.path, task())
    result = pytester.runpytest("--llm-model=nop,oracle")
    result.assert_outcomes(errors=1)
    kind = "FIFO" if special == "fifo" else "socket"
    result.stdout.fnmatch_lines([f"*optimization.project: pkg/pipe is a {kind}*"])
    assert "Traceback" not in result.stdout.str()


def test_a_utf16_task_file_is_an_error_item(pytester: pytest.Pytester) -> None:
    write_project(pytester.path)
    path = write_task(pytester.path, task())
    path.write_bytes(path.read_text().encode("utf-16"))
    result = pytester.runpytest("--llm-model=nop")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*task.yaml*UTF-16*not UTF-8*"])


def _copy(root: Path) -> Copy:
    (root / "work").mkdir(parents=True)
    return Copy("agent", root, root / "work", {}, None)


def test_asv_outputs_are_never_read_through_links_nor_deleted(tmp_path: Path, victim: Path) -> None:
    """A link the agent planted after load is not followed; no file is deleted."""
    write_project(tmp_path)
    copy = _copy(tmp_path / "item")
    (copy.workdir / "results").symlink_to(victim)
    (copy.workdir / "old.json").write_text('{"version": 2}')
    loaded = load_task(write_task(tmp_path, task(benchmarks={**ASV_BENCH, "output": "**/*.json"})))
    assert not isinstance(loaded, str)
    info = (copy.workdir / "old.json").lstat()
    before = {copy.workdir / "old.json": (info.st_ino, info.st_size, info.st_mtime_ns)}
    assert _read_times(loaded, copy, tmp_path, before) is None
    assert (victim / "precious.json").exists() and (copy.workdir / "old.json").exists()


def test_the_harness_is_what_the_commands_name_plus_config(tmp_path: Path) -> None:
    write_project(tmp_path)
    (tmp_path / "project" / "snap.py").write_text("print(1)\n")
    data = task(snapshot={"command": "python ./snap.py"}, harness=["pkg/__init__.py"])
    loaded = load_task(write_task(tmp_path, data))
    assert not isinstance(loaded, str)
    assert harness.harness_paths(loaded) == [
        ".pytest.ini",
        "benches",
        "conftest.py",
        "pkg/__init__.py",
        "pytest.ini",
        "setup.cfg",
        "sitecustomize.py",
        "snap.py",
        "tests",
        "tox.ini",
        "usercustomize.py",
    ]
    (tmp_path / "project" / "pytest.ini").unlink()  # then pyproject.toml configures pytest
    assert "pyproject.toml" in harness.harness_paths(loaded)


def test_shadowing_an_installed_module_is_tampering(tmp_path: Path) -> None:
    write_project(tmp_path)
    loaded = load_task(write_task(tmp_path, task()))
    assert not isinstance(loaded, str)
    work = tmp_path / "work"
    shutil.copytree(loaded.project, work)
    assert harness.changes(loaded, work) == []
    (work / "pytest_benchmark").mkdir()
    (work / "pytest_benchmark" / "__init__.py").write_text("")
    (work / "build").mkdir()  # a namespace folder (`python setup.py build`) shadows nothing
    (work / "asv").symlink_to(work / "pytest_benchmark")  # a link to a package is one
    (work / "fastpath.py").write_text("")  # a new module of the project's own is fine
    (work / "benches" / "__pycache__").mkdir()  # caches are not compared
    assert harness.changes(loaded, work) == [
        "asv (shadows the installed module asv)",
        "pytest_benchmark (shadows the installed module pytest_benchmark)",
    ]
    (work / "tests").rename(work / "elsewhere")
    (work / "tests").symlink_to(work / "elsewhere")
    assert "tests" in harness.changes(loaded, work)
    harness.restore(loaded, work)
    assert stat.S_ISDIR((work / "tests").lstat().st_mode)
    assert (work / "elsewhere" / "check_rows.py").exists()  # not removed through the link


# The probe's attack: make the benchmark measure nothing.
REWRITE_BENCH = (
    "sed -i 's/pedantic(work/pedantic(len/; s/args=(3,)/args=((3,),)/' benches/bench_rows.py\n"
)


def test_an_agent_that_rewrites_the_benchmark_is_tampered_not_faster(
    pytester: pytest.Pytester,
) -> None:
    write_project(pytester.path)
    write_task(pytester.path, task())
    agent = write_agent(pytester.path, REWRITE_BENCH)
    result = pytester.runpytest(
        f"--llm-agent-cmd={agent}", "--llm-model=m", "--llm-report=out", "--llm-summary=full"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*: tampered with the harness (benches/bench_rows.py)*", "*TAMPERED*"]
    )
    # issue 20: each figure rounded, defined under the tables, and Passed beside Success
    result.stdout.re_match_lines(
        [
            r"^tests: 1 passed, 0 failed, 0 errors; advantage \(agent - oracle speedup\) "
            r"-\d+\.\d{3}$",
            r"^external:m +1 +1\.00x .* 0% +0% ",
            r"^Agents: builtin:<model> is the built-in tool loop",
            r"^Success: the attempt kept the tests and snapshot passing and did not tamper",
        ]
    )
    (run,) = read_report(pytester)["optimization_results"]
    assert run["tampered_files"] == ["benches/bench_rows.py"]
    metrics = run["metrics"]
    assert metrics["tampered"] and not metrics["success"] and metrics["fallback_to_baseline"]
    assert metrics["task_speedup"] == 1.0
    work = Path(run["artifacts"]) / "work"
    assert "pedantic(work" in (work / "benches" / "bench_rows.py").read_text()  # restored
    assert schema_errors(read_report(pytester), closed=True) == []
    report_md = (pytester.path / "out" / "report.md").read_text()
    assert "Tampered: `benches/bench_rows.py`" in report_md


def test_an_agent_that_edits_the_tests_to_pass_is_tampered(pytester: pytest.Pytester) -> None:
    write_project(pytester.path)
    write_task(pytester.path, task())
    body = "cp broken/rows.py pkg/rows.py\nsed -i 's/== 4/== 6/' tests/check_rows.py\n"
    agent = write_agent(pytester.path, body)
    result = pytester.runpytest(f"--llm-agent-cmd={agent}", "--llm-model=m", "--llm-report=out")
    result.assert_outcomes(failed=1)
    (run,) = read_report(pytester)["optimization_results"]
    assert run["tampered_files"] == ["tests/check_rows.py"]
    assert run["metrics"]["pytest_failed"]  # the restored tests catch the broken code


# Fast, but raises on the benchmark's input: the agent's benchmark run measures nothing.
CRASH_ON_BENCH = """cat > pkg/rows.py <<'EOF'
def work(n):
    if n == 3:
        raise ValueError(n)
    return n * 2
EOF
"""


def test_an_agent_that_breaks_its_own_measurement_fails(pytester: pytest.Pytester) -> None:
    write_project(pytester.path)
    write_task(pytester.path, task())
    agent = write_agent(pytester.path, CRASH_ON_BENCH)
    result = pytester.runpytest(f"--llm-agent-cmd={agent}", "--llm-model=m", "--llm-report=out")
    result.assert_outcomes(failed=1)  # not an error left out of every score
    result.stdout.fnmatch_lines(["*: its benchmark run failed*"])
    (run,) = read_report(pytester)["optimization_results"]
    assert run["metrics"]["measurement_failed"] and not run["metrics"]["success"]
    assert any("the agent's benchmark run failed" in note for note in run["notes"])


def test_an_agent_that_links_its_results_away_is_not_an_error(pytester: pytest.Pytester) -> None:
    write_project(pytester.path)
    write_task(pytester.path, task(min_speedup=100))
    agent = write_agent(pytester.path, "rm -rf ../results && ln -s /tmp ../results\n")
    result = pytester.runpytest(f"--llm-agent-cmd={agent}", "--llm-model=m", "--llm-report=out")
    result.assert_outcomes(failed=1)  # measured from a fresh results directory: no speedup
    (run,) = read_report(pytester)["optimization_results"]
    assert run["metrics"]["success"] and not run["tampered_files"]


def test_a_long_test_log_still_finds_the_summary_line(pytester: pytest.Pytester) -> None:
    write_project(pytester.path)
    flood = 'python -c \'import sys; sys.stdout.write(("log line " * 10 + "\\n") * 40000)\'; '
    tests = {"command": flood + SUMMARY_CMD, "format": "summary"}
    write_task(pytester.path, task(tests=tests))
    result = pytester.runpytest("--llm-model=oracle", "--llm-report=out")
    result.assert_outcomes(passed=1)  # 3.3 MB of log before pytest's summary line


def test_a_snapshot_that_times_out_says_so(pytester: pytest.Pytester) -> None:
    write_project(pytester.path)
    data = task(snapshot={"command": "sleep 30"}, timeouts={"tests": 5})
    write_task(pytester.path, data)
    result = pytester.runpytest("--llm-model=nop")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*the snapshot command fails on the baseline (timed out after 5 s): sleep 30*"]
    )


def test_the_lock_lives_in_a_private_directory(tmp_path: Path) -> None:
    directory = lock_directory(tmp_path)
    assert stat.S_IMODE(directory.lstat().st_mode) == 0o700
    assert directory.lstat().st_uid == os.getuid()


def test_a_planted_lock_directory_or_file_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / f"pytest-llmtool-{os.getuid()}").symlink_to(elsewhere)
    with pytest.raises(SandboxError, match="not a directory of yours"):
        lock_directory(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / f"pytest-llmtool-{os.getuid()}").mkdir(mode=0o777)
    os.chmod(shared / f"pytest-llmtool-{os.getuid()}", 0o777)
    with pytest.raises(SandboxError, match="only you can write"):
        lock_directory(shared)


@pytest.mark.parametrize("planted", ["fifo", "link"])
def test_a_fifo_or_link_as_the_lock_is_refused_without_hanging(
    tmp_path: Path, planted: str
) -> None:
    lock = lock_directory(tmp_path) / LOCK_NAME
    if planted == "fifo":
        os.mkfifo(lock)
    else:
        lock.symlink_to(tmp_path / "created-elsewhere")

    async def take() -> None:
        async with host_lock(tmp_path):
            pass

    with pytest.raises(SandboxError, match="benchmark lock"):
        asyncio.run(take())
    assert not (tmp_path / "created-elsewhere").exists()


def test_waiting_for_the_lock_says_so_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    held = os.open(lock_directory(tmp_path) / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)

    async def take() -> None:
        async def release() -> None:
            await asyncio.sleep(0.2)
            os.close(held)

        releasing = asyncio.ensure_future(release())
        async with host_lock(tmp_path):
            pass
        await releasing

    asyncio.run(take())
    lines = capsys.readouterr().err.splitlines()
    assert [line for line in lines if "waiting" in line] == [
        f"pytest-llmtool: waiting for another measurement to finish (benchmark lock "
        f"{tmp_path / f'pytest-llmtool-{os.getuid()}' / LOCK_NAME})"
    ]


# Fast, and when imported (by the tests, after the harness was restored) rewrites the benchmark.
REWRITE_AT_IMPORT = """cat > pkg/rows.py <<'END'
import pathlib

bench = pathlib.Path(__file__).parent.parent / "benches" / "bench_rows.py"
if bench.exists():
    bench.write_text(bench.read_text().replace("pedantic(work", "pedantic(abs"))


def work(n):
    return n * 2
END
"""


def test_an_agent_whose_code_rewrites_the_benchmark_later_is_tampered(
    pytester: pytest.Pytester,
) -> None:
    write_project(pytester.path)
    write_task(pytester.path, task())
    agent = write_agent(pytester.path, REWRITE_AT_IMPORT)
    result = pytester.runpytest(f"--llm-agent-cmd={agent}", "--llm-model=m", "--llm-report=out")
    result.assert_outcomes(failed=1)
    (run,) = read_report(pytester)["optimization_results"]
    assert run["tampered_files"] == ["benches/bench_rows.py"]
    assert run["metrics"]["tampered"] and run["metrics"]["task_speedup"] == 1.0
    assert any("while it was tested or measured" in note for note in run["notes"])


def test_an_agent_that_replaces_its_copy_by_a_link_deletes_nothing(
    pytester: pytest.Pytester, victim: Path
) -> None:
    """Restoring the harness through `work -> victim` would remove the victim's folders."""
    for folder in ("benches", "tests"):
        (victim / folder).mkdir()
        (victim / folder / "keep.txt").write_text("mine")
    write_project(pytester.path)
    write_task(pytester.path, task())
    agent = write_agent(pytester.path, f"cd .. && mv work gone && ln -s {victim} work\n")
    result = pytester.runpytest(f"--llm-agent-cmd={agent}", "--llm-model=m", "--llm-report=out")
    result.assert_outcomes(failed=1)
    (run,) = read_report(pytester)["optimization_results"]
    assert run["tampered_files"] == ["work (the copy itself was replaced or removed)"]
    assert (victim / "benches" / "keep.txt").exists() and (victim / "tests" / "keep.txt").exists()
