"""Where a run writes: checked before its first item, and its report directory held.

The writers run at the end of a run (the journal at its first result), so a path they
cannot write used to fail only after items had run and paid. Every output path is checked
when the plugin wakes instead, and a bad one is a usage error naming the option. Two runs
writing one `--llm-report` directory would leave one run's `report.json` beside the other's
`report.md` and journal: a run holds the directory with a `flock` on its `.llmtool.lock`,
which the kernel lets go of however the process ends (a SIGKILL too), and a second run is
refused. Both are the controller's: xdist's workers write no report.
"""

from __future__ import annotations

import fcntl
import functools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_llmtool.settings import OPTIONS, Settings, raw_option

LOCK_NAME = ".llmtool.lock"


def _writable(directory: Path) -> bool:
    """Whether this process may make entries in `directory` (a read-only mount says no)."""
    return os.access(directory, os.W_OK | os.X_OK)


def problem(path: Path, directory: bool) -> str | None:
    """What stops this process from writing `path`, a directory it fills or a file it
    writes (made with its parents when missing), or None when nothing does."""
    if path.is_dir():
        if not directory:
            return "is a directory, and a file is needed"
        return None if _writable(path) else "is a directory this user cannot write to"
    if os.path.lexists(path):
        if directory:
            return "exists and is not a directory"
        if not path.exists():
            return "is a symbolic link to nothing"
        return None if os.access(path, os.W_OK) else "is a file this user cannot write to"
    ancestor = next(p for p in path.parents if os.path.lexists(p))
    if not ancestor.is_dir():
        return f"cannot be made: {ancestor} is not a directory"
    if not _writable(ancestor):
        return f"cannot be made: {ancestor} is a directory this user cannot write to"
    return None


def _given(config: pytest.Config, name: str) -> bool:
    """Whether the command line or the ini file sets the option (not its default)."""
    return raw_option(config, next(o for o in OPTIONS if o.name == name)) is not None


def _foreign(config: pytest.Config, dest: str) -> Path | None:
    """Another plugin's output file option, as that plugin resolves it (from the current
    directory, `~` and `$VARS` expanded)."""
    given = config.getoption(dest, None)
    if not given:
        return None
    return Path.cwd() / Path(os.path.expandvars(str(given))).expanduser()


def outputs(config: pytest.Config, settings: Settings) -> Iterator[tuple[str, Path, bool]]:
    """Each path the run will write: the option naming it, the path, whether a directory."""
    named = [
        ("--llm-report", settings.report_dir, True),
        ("--llm-gaps", settings.gaps, True),
        ("--llm-inspect-log", settings.inspect_log, True),
        ("--llm-trajectories", settings.trajectories, True),
        ("--llm-harbor-jobs", settings.harbor_jobs, True),
        ("--llm-record", settings.record_dir, True),
        # The default database is written only if the run has results: a failure there is
        # said at the end (`history.HistoryWriter`), never a refusal of an unrelated run.
        ("--llm-history", settings.history if _given(config, "llm_history") else None, False),
        ("--junitxml", _foreign(config, "xmlpath"), False),
    ]
    if config.pluginmanager.hasplugin("html"):
        named.append(("--html", _foreign(config, "htmlpath"), False))
    for option, path, directory in named:
        if path is not None:
            yield option, path, directory


def _holder(fd: int) -> str:
    """` (pid N)` as the lock file says, when it says."""
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return f" (pid {text})" if text.isdigit() else ""


def _in_use(option: str, directory: Path, fd: int) -> pytest.UsageError:
    return pytest.UsageError(
        f"{option}: report directory {directory} is in use by another run{_holder(fd)}; "
        "wait for it to end, or write elsewhere"
    )


def hold(directory: Path) -> int:
    """Lock the report directory for this process (made if missing): the lock file's
    descriptor, to close when the last writer is done. A usage error when another run holds
    it."""
    option = "--llm-report"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise pytest.UsageError(f"{option}: cannot lock {directory}: {exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        error = _in_use(option, directory, fd)
        os.close(fd)
        raise error from None
    except OSError as exc:
        os.close(fd)
        raise pytest.UsageError(f"{option}: cannot lock {directory}: {exc}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _resumed_dir(settings: Settings) -> Path | None:
    """The directory `--llm-resume=DIR` reads another run's journal from, when it is not the
    report directory (which this run holds)."""
    given = settings.resume
    if not isinstance(given, Path):
        return None
    directory = given if given.is_dir() else given.parent
    if settings.report_dir is not None and directory.resolve() == settings.report_dir.resolve():
        return None
    return directory


def _check_free(directory: Path, option: str) -> None:
    """A usage error when a run holds `directory` now (its journal is still being written)."""
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:  # no run has held it
        return
    except OSError as exc:
        why = f"cannot tell whether a run holds {directory}: {exc}"
        raise pytest.UsageError(f"{option}: {why}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(option, directory, fd) from None
    finally:
        os.close(fd)  # lets go of the shared lock taken, if any


def claim(config: pytest.Config, settings: Settings) -> None:
    """On the reporting process, when the plugin wakes: refuse every output path this run
    could not write, and a report directory (or one resumed from) that another run is
    writing; then hold the report directory until the run's last cleanup."""
    problems = [
        f"{option}: {path} {what}"
        for option, path, directory in outputs(config, settings)
        if (what := problem(path, directory)) is not None
    ]
    if problems:
        raise pytest.UsageError("\n".join(problems))
    resumed = _resumed_dir(settings)
    if resumed is not None:
        _check_free(resumed, "--llm-resume")
    # A run that only collects writes nothing: it may look while another run writes.
    if settings.report_dir is not None and not config.option.collectonly:
        fd = hold(settings.report_dir)
        # Cleanups run after every session finish, so after pytest-html's and JUnit's too.
        config.add_cleanup(functools.partial(os.close, fd))
