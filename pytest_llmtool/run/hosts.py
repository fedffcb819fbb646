"""What crosses between the xdist controller and its workers, besides xdist's own reports.

A worker may run where the controller's files are not (`--tx ssh=…`, `socket=…`,
`popen//chdir=…`), so nothing here goes through a shared directory. The controller hands each
worker an execnet channel in its `workerinput`, and on it:

- the spend (`--llm-max-cost`): a worker sends its own total, and the worst cases it holds
  for its calls under way (`agents/budget.py`), whenever either changes; the controller keeps
  every worker's and sends each of the others what the rest of the run has spent and holds,
  so that no process starts a call the run's limit has no room for;
- recordings (`--llm-record`), each as it is written, to the same relative path in the
  controller's record directory;
- a refusal, from a worker whose pytest-llmtool or bashkit differs from the controller's (a
  run whose hosts disagree would compare results no single version produced), or whose own
  settings fail there (no API key on that host): the controller stops the run with the reason,
  where xdist would show a crashed worker and start replacements that fail alike.

A finished item's artifacts (a scenario's transcript and evaluation, an optimization task's
copy) ride on its report and are written on the controller before the `Controller` journals
the result, whose `artifacts` then names the controller's copy. A worker that shares the
controller's filesystem (a plain `popen` worker, xdist's own criterion) sends no files.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import socket
import threading
from collections.abc import Generator
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

import pytest_llmtool
from pytest_llmtool.agents.budget import Budget
from pytest_llmtool.run.compat import item_tmp_path
from pytest_llmtool.run.roles import RESULT_ATTR
from pytest_llmtool.run.state import STATE_KEY

if TYPE_CHECKING:  # pytest-xdist (and execnet) is optional: only for -n and --tx
    import execnet

CHANNEL_KEY = "llmtool_channel"
SHARES_FILES_KEY = "llmtool_shares_files"
VERSIONS_KEY = "llmtool_versions"
FILES_ATTR = "llmtool_files"
# An item's artifacts sent back at most; what does not fit stays on the worker, listed in
# NOT_COPIED in the controller's copy. One execnet message must stay reasonable in memory.
SHIP_LIMIT = 64 * 1024 * 1024
NOT_COPIED = "llmtool-not-copied.txt"
_GONE = ("gone",)  # what a controller's channel callback gets when the worker's channel closes


def installed_versions() -> dict[str, str | None]:
    """What every host must run alike: the plugin, and the sandbox bash tasks run in."""
    try:
        bashkit: str | None = importlib.metadata.version("bashkit")
    except importlib.metadata.PackageNotFoundError:
        bashkit = None
    return {"pytest-llmtool": pytest_llmtool.__version__, "bashkit": bashkit}


def version_mismatch(here: dict[str, str | None], controller: dict[str, str | None]) -> str | None:
    """What differs between a worker's versions and the controller's, in one phrase."""
    differ = [
        f"{name} {here.get(name) or '(not installed)'} on the worker, "
        f"{controller.get(name) or '(not installed)'} on the controller"
        for name in sorted(set(here) | set(controller))
        if here.get(name) != controller.get(name)
    ]
    return "; ".join(differ) or None


class Ledger:
    """Each worker's total spend and reservations, as it last said: from them, what the rest
    of the run has spent and holds as seen by any one worker. A total only grows, so a message
    overtaken by a later one changes nothing; reservations come and go, and a worker's arrive
    in order on its channel, so the last said holds."""

    def __init__(self) -> None:
        self._totals: dict[str, float] = {}
        self._reserved: dict[str, float] = {}

    def record(self, worker: str, total: float, reserved: float = 0.0) -> None:
        self._totals[worker] = max(self._totals.get(worker, 0.0), total)
        self._reserved[worker] = reserved

    def total(self) -> float:
        return sum(self._totals.values())

    def others(self, worker: str) -> float:
        return sum(spent for name, spent in self._totals.items() if name != worker)

    def reserved_by_others(self, worker: str) -> float:
        return sum(held for name, held in self._reserved.items() if name != worker)


def inside(root: Path, relative: str) -> Path:
    """`root/relative`, refused (ValueError) unless it stays inside `root`: the path comes from
    a worker, which must not get the controller to write anywhere else."""
    path = PurePosixPath(relative)
    if path.is_absolute() or not path.parts or ".." in path.parts:
        raise ValueError(f"not a relative path inside {root}: {relative!r}")
    target = root.joinpath(*path.parts)
    if not target.resolve().is_relative_to(root.resolve()):
        raise ValueError(f"leads out of {root} through a symbolic link: {relative!r}")
    return target


def write_inside(root: Path, relative: str, data: bytes) -> Path:
    """Write a file a worker sent under `root` (see `inside`), whole or not at all."""
    target = inside(root, relative)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    partial.write_bytes(data)
    os.replace(partial, target)
    return target


def pack(directory: Path, limit: int = SHIP_LIMIT) -> tuple[dict[str, bytes], list[str]]:
    """The regular files under `directory` by relative path, `limit` bytes in all at most, and
    a line for each file left out saying why. Symbolic links are not followed: they name files
    the item did not make, possibly anywhere on the worker."""
    files: dict[str, bytes] = {}
    left: list[str] = []
    size = 0
    for base, dirs, names in os.walk(directory):
        dirs.sort()
        for name in sorted(names):
            path = Path(base, name)
            if path.is_symlink() or not path.is_file():
                continue
            relative = path.relative_to(directory).as_posix()
            try:
                if size + path.stat().st_size > limit:
                    left.append(f"{relative}: over the {limit} bytes an item sends back")
                    continue
                files[relative] = path.read_bytes()
            except OSError as exc:
                left.append(f"{relative}: unreadable: {exc}")
                continue
            size += len(files[relative])
    return files, left


class HostsWorker:
    """On an xdist worker: refuses to run with other versions than the controller's, keeps the
    budget in step with the run's, and sends back what it writes for the controller."""

    def __init__(self, workerinput: dict[str, Any]) -> None:
        self.worker: str = workerinput["workerid"]
        self.channel: execnet.Channel | None = workerinput.get(CHANNEL_KEY)
        self.controller_versions: dict[str, str | None] | None = workerinput.get(VERSIONS_KEY)
        self.shares_files: bool = workerinput.get(SHARES_FILES_KEY, True)
        self.host = socket.gethostname()

    def check_versions(self) -> None:
        """Refuse to run when this host's versions differ from the controller's."""
        if self.controller_versions is None:
            # A controller without this module: an older pytest-llmtool, or none at all.
            differ: str | None = "the controller runs an older pytest-llmtool"
        else:
            differ = version_mismatch(installed_versions(), self.controller_versions)
        if differ is not None:
            self.refuse(f"{differ}; install the same pytest-llmtool and bashkit on every host")

    def refuse(self, reason: str) -> NoReturn:
        """Stop this worker with a usage error, telling the controller first, so that it stops
        the run with the reason: xdist would show a crashed worker's traceback and start
        replacements that fail the same way (without end under `--tx` alone)."""
        self._send(("refused", self.host, reason))
        raise pytest.UsageError(
            f"pytest-llmtool: xdist worker {self.worker} (host {self.host}) refuses to run: "
            f"{reason}"
        )

    def attach(self, budget: Budget) -> None:
        """Tell the controller this worker's spend, and hear the rest of the run's."""
        if self.channel is None or budget.limit is None:
            return
        budget.publish = lambda own, reserved: self._send(("spent", own, reserved))
        self.channel.setcallback(lambda heard: budget.hear(*heard))

    def forward_recording(self, relative: str, data: bytes) -> None:
        self._send(("record", relative, data))

    def _send(self, message: tuple[Any, ...]) -> None:
        if self.channel is None:
            return
        # OSError: the controller has gone, this worker is being torn down.
        with contextlib.suppress(OSError):
            self.channel.send(message)

    # Outermost (tryfirst), so it sees the result the Runner's wrapper put on the report.
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        carried = getattr(report, RESULT_ATTR, None)
        if carried is None or self.shares_files:
            return report
        where = json.loads(carried["data"]).get("artifacts")  # the result, as JSON text
        if where:
            files, left = pack(Path(where))
            shipped = {"worker": self.worker, "host": self.host, "from": where}
            setattr(report, FILES_ATTR, {**shipped, "files": files, "left": left})
        return report


class HostsController:
    """On the reporting process: gives every xdist worker its channel, keeps the run's spend,
    writes what workers send back, and stops the run when one refuses."""

    def __init__(self, config: pytest.Config, budget: Budget) -> None:
        self.config = config
        self.budget = budget
        self.ledger = Ledger()
        self._channels: dict[str, execnet.Channel] = {}
        self._refused: dict[str, tuple[str, str]] = {}  # worker: its host, what differs
        self.problems: list[str] = []
        self._lock = threading.Lock()  # channel callbacks run in execnet's receiver threads
        if budget.limit is not None:
            budget.publish = self._spent_here

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        worker: str = node.workerinput["workerid"]
        spec = node.gateway.spec
        channel = node.gateway.newchannel()
        node.workerinput[CHANNEL_KEY] = channel
        node.workerinput[VERSIONS_KEY] = installed_versions()
        # xdist's own test for a worker that does not see our files (it rsyncs to those),
        # and a popen started through another host (`via`) runs there.
        node.workerinput[SHARES_FILES_KEY] = bool(spec.popen and not spec.chdir and not spec.via)
        with self._lock:
            self._channels[worker] = channel
        channel.setcallback(lambda message: self._received(worker, message), endmarker=_GONE)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node: Any) -> None:
        """Tell a new worker what the run has spent so far (a replacement for a crashed one,
        a resumed run's spend). Not earlier: until the worker has its channel, execnet would
        drop what is sent on it."""
        worker: str = node.workerinput["workerid"]
        with self._lock:
            channel = self._channels.get(worker)
        if channel is not None and self.budget.limit is not None:
            self._tell({worker: channel})

    def _received(self, worker: str, message: tuple[Any, ...]) -> None:
        """A worker's message, in execnet's receiver thread: never raise (that would close the
        channel), and keep the work short."""
        kind = message[0]
        if kind == "spent":
            with self._lock:
                self.ledger.record(worker, float(message[1]), float(message[2]))
                total = self.ledger.total()
                others = {w: c for w, c in self._channels.items() if w != worker}
            self.budget.hear(total)
            self._tell(others)
        elif kind == "record":
            self._write_recording(message[1], message[2])
        elif kind == "refused":
            self._refused[worker] = (str(message[1]), str(message[2]))
        elif message == _GONE:
            with self._lock:
                self._channels.pop(worker, None)

    def _spent_here(self, own: float, reserved: float) -> None:
        """The controller's own spend (a resumed run's, say) counts for every worker."""
        with self._lock:
            everyone = dict(self._channels)
        self._tell(everyone)

    def _tell(self, channels: dict[str, execnet.Channel]) -> None:
        """Send each worker what the rest of the run has spent and holds (the controller's own
        spend too). Sent under the lock, so that each worker hears them in the order they were
        reckoned: the latest reservations are the ones that hold."""
        for worker, channel in channels.items():
            with self._lock:
                elsewhere = self.budget.own + self.ledger.others(worker)
                held = self.ledger.reserved_by_others(worker)
                with contextlib.suppress(OSError):  # that worker is gone
                    channel.send((elsewhere, held))

    def _write_recording(self, relative: str, data: bytes) -> None:
        directory = self.config.stash[STATE_KEY].settings.record_dir
        if directory is None:
            return
        try:
            write_inside(directory, relative, data)
        except (OSError, ValueError) as exc:
            self.problems.append(f"a worker's recording was not written: {exc}")

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """A worker that refused to run stops the run, saying why."""
        refused = self._refused.get(node.workerinput["workerid"])
        if refused is not None:
            host, reason = refused
            spec = str(node.gateway.spec).removeprefix("execmodel=main_thread_only//")
            raise pytest.UsageError(
                f"pytest-llmtool: xdist worker {node.gateway.id} ({spec}, host {host}) refused "
                f"to run: {reason}"
            )

    @pytest.hookimpl(tryfirst=True)  # before the Controller journals the result
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        shipped = report.__dict__.pop(FILES_ATTR, None)
        carried = getattr(report, RESULT_ATTR, None)
        if shipped is None or carried is None:
            return
        name = report.nodeid.rsplit("::", 1)[-1]
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{shipped['worker']}-{name}")[:40]
        copy = item_tmp_path(self.config, stem)
        left = list(shipped["left"])
        for relative, data in shipped["files"].items():
            try:
                write_inside(copy, relative, data)
            except (OSError, ValueError) as exc:
                left.append(f"{relative!r}: not written here: {exc}")
        if left:
            (copy / NOT_COPIED).write_text(
                f"Left on {shipped['worker']} (host {shipped['host']}) in {shipped['from']}:\n"
                + "".join(f"{line}\n" for line in left),
                encoding="utf-8",
            )
        data = json.loads(carried["data"])
        data["artifacts"] = str(copy)
        carried["data"] = json.dumps(data, ensure_ascii=False)
        if isinstance(report.longrepr, str):  # a failure's text names the artifacts too
            report.longrepr = report.longrepr.replace(shipped["from"], str(copy))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for problem in self.problems:
            terminalreporter.write_line(f"llmtool: {problem}")
