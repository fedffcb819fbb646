"""The pytest-html report at scale: 5,000 items, its size, its cost, and a browser opening it.

A generated dataset of N bash tasks (5,000) is run under `--llm-model=oracle`: each task has
a small input file and two or three commands printing a few lines, one task in ten expects
text no command prints (so it fails and its row starts expanded, as pytest-html shows
failures). The same command runs with and without `--html=report.html --self-contained-html`,
interleaved, and the median wall times are compared (ratio against the run without the
report). Then headless Chromium (selenium, Debian's chromedriver, a file:// URL, no
network) loads the report: the time from navigation until the document is complete and the
results table has its N rows, then the time from clicking "Show all details" until every row
is expanded, scrolled to the bottom and painted. Nothing is asserted: the numbers are printed.

With `--before SRC` (a source tree of pytest-llmtool, e.g. `git archive main | tar -x -C SRC`)
the same run also writes its report with that code (`PYTHONPATH=SRC`), and the browser loads
it too: each timing is then printed for the page before and after, with their ratio.

    python benchmarks/bench_html.py [--n 5000] [--rounds 2] [--workers 0] [--loads 3] [--keep]
                                    [--before SRC]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _harness import Run, fmt_ratio, header, measure, time_run, workdir

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CATEGORIES = 10
FAIL_EVERY = 10
# "3 failed, 7 passed in 1.2s" (with -q, --tb=no): the item count is failed + passed.
OUTCOME = re.compile(r"^(\d+) failed, (\d+) passed(?:, \d+ warnings?)? in [\d.]+s", re.MULTILINE)


class FailingRun(Run):
    """A run some of whose items fail on purpose: exit code 1, failed + passed items."""

    def check(self, returncode: int, output: str) -> None:
        match = self.expect.search(output)
        total = int(match.group(1)) + int(match.group(2)) if match else -1
        if returncode != 1 or total != self.count:
            tail = "\n".join(output.splitlines()[-25:])
            raise SystemExit(
                f"benchmark run {self.label!r} did not do what was expected (exit "
                f"{returncode}, wanted {self.count} failed + passed items):\n{tail}"
            )


def write_dataset(path: Path, n: int) -> int:
    """N tasks; returns how many are meant to fail."""
    failing = 0
    with path.open("w", encoding="utf-8") as stream:
        for i in range(n):
            lines = "".join(f"row {j} of task {i}: value={(i * 7 + j) % 13}\n" for j in range(5))
            solution = ["sort /in/data.txt | uniq -c", "wc -l /in/data.txt"]
            if i % 3 == 0:
                solution.append("grep -c value= /in/data.txt; echo warning: none >&2")
            wanted = f"task {i}:"
            if i % FAIL_EVERY == FAIL_EVERY - 1:
                wanted, failing = f"no such text {i}", failing + 1
            task = {
                "id": f"t{i:05d}",
                "category": f"c{i % CATEGORIES}",
                "description": f"summarise data file {i}",
                "prompt": f"Count the distinct rows of /in/data.txt (task {i}).",
                "files": {"/in/data.txt": lines},
                "expectations": [
                    {"check": "exit_code:0"},
                    {"check": f"stdout_contains:{wanted}"},
                    {"check": "tool_calls_max:5", "weight": 0.5},
                ],
                "solution": solution,
            }
            stream.write(json.dumps(task) + "\n")
    return failing


# --------------------------------------------------------------------------------- browser


def start_browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(600)
    driver.set_script_timeout(600)
    # The client's own wait for chromedriver's answer (120 s by default): a page that takes
    # longer to expand is measured, not dropped.
    driver.command_executor.client_config.timeout = 900
    return driver


ROWS = "document.querySelectorAll('#results-table tbody.results-table-row').length"
# Each action runs in the page and reports once two animation frames have passed after it
# (the layout and paint it caused are done): in-page milliseconds.
TOGGLE_ONE = """
const done = arguments[arguments.length - 1];
const cell = document.querySelector('#results-table tbody.passed tr.collapsible td.col-result');
const started = performance.now();
cell.click();
requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now() - started)));
"""
# "Show all details", then scroll to the very bottom.
EXPAND_ALL = """
const done = arguments[arguments.length - 1];
const started = performance.now();
document.getElementById('show_all_details').click();
const hidden = document.querySelectorAll('#results-table tr.extras-row.hidden').length;
window.scrollTo(0, document.documentElement.scrollHeight);
requestAnimationFrame(() => requestAnimationFrame(() => done({
  ms: performance.now() - started, hidden: hidden,
  height: document.documentElement.scrollHeight,
})));
"""


@dataclass
class PageTimes:
    load: list[float] = field(default_factory=list)  # wall s, navigation to rows present
    load_event: list[float] = field(default_factory=list)  # in-page s, to the load event
    toggle: list[float] = field(default_factory=list)  # wall s, one passed row's click
    expand: list[float] = field(default_factory=list)  # wall s, show all + scroll to end
    height: float = 0.0  # px, fully expanded


def visit(driver: Any, path: Path, rows: int, times: PageTimes) -> None:
    """Load the page, open one row, then every row; the wall time of each step."""
    driver.get("about:blank")
    started = time.perf_counter()
    driver.get(path.as_uri())  # returns at the load event; pytest-html draws before it
    while driver.execute_script(f"return document.readyState === 'complete' && {ROWS}") != rows:
        time.sleep(0.01)
    times.load.append(time.perf_counter() - started)
    times.load_event.append(
        driver.execute_script(
            "const [n] = performance.getEntriesByType('navigation'); return n.loadEventEnd;"
        )
        / 1000
    )
    started = time.perf_counter()
    driver.execute_async_script(TOGGLE_ONE)
    times.toggle.append(time.perf_counter() - started)
    started = time.perf_counter()
    expanded = driver.execute_async_script(EXPAND_ALL)
    times.expand.append(time.perf_counter() - started)
    if expanded["hidden"]:
        print(f"  (show all details left {expanded['hidden']} rows hidden)")
    times.height = expanded["height"]


def browse(pages: dict[str, Path], rows: int, loads: int) -> None:
    """Each page `loads` times, the pages interleaved; medians, ours against the baseline."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if importlib.util.find_spec("selenium") is None:
        missing.append("selenium")
    if missing:
        print(f"browser: skipped, missing {', '.join(missing)}")
        return
    driver = start_browser()
    times = {label: PageTimes() for label in pages}
    try:
        for index in range(loads):
            for label, path in pages.items():
                visit(driver, path, rows, times[label])
                t = times[label]
                print(
                    f"  load {index + 1}  {label:<10} load {t.load[-1]:6.2f} s   one row "
                    f"{t.toggle[-1]:6.2f} s   show all + scroll {t.expand[-1]:6.2f} s",
                    flush=True,
                )
    finally:
        driver.quit()
    labels = list(pages)
    against = [label for label in ("baseline", "before") if label in times]
    print("-" * 78)
    print(f"  Chromium, medians of {loads} loads, {rows} rows")
    print(
        "    "
        + " " * 34
        + "".join(f"{label:>11}" for label in labels)
        + "".join(f"{'ours/' + label:>16}" for label in against)
    )
    for what, attribute in (
        ("load until the table has its rows", "load"),
        ("  of which up to the load event", "load_event"),
        ("click one passed row open", "toggle"),
        ("show all details + scroll to end", "expand"),
    ):
        median = {label: statistics.median(getattr(times[label], attribute)) for label in labels}
        shown = "".join(f"{median[label]:9.2f} s" for label in labels)
        ratios = "".join(f"{fmt_ratio(median['ours'] / median[label]):>16}" for label in against)
        print(f"    {what:<34}{shown}{ratios}")
    heights = "".join(f"{times[label].height / 1e6:7.2f} Mpx" for label in labels)
    print(f"    {'page height, all expanded':<34}{heights}")
    print("-" * 78, flush=True)


def before_report(source: Path, command: list[str], cwd: Path) -> Path:
    """The same run's report written by the code in `source`: the page before a change."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *command, "--html=before.html", "--self-contained-html"],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    path = cwd / "before.html"
    if not path.is_file():
        raise SystemExit(f"--before {source}: no report written:\n{done.stdout[-2000:]}")
    print(f"  before: report.html by {source}, {path.stat().st_size / 1e6:.1f} MB", flush=True)
    return path


# -------------------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--n", type=int, default=5000, help="tasks = items (default 5000)")
    parser.add_argument("--rounds", type=int, default=2, help="timed pytest rounds (default 2)")
    parser.add_argument("--workers", default="0", help="pytest-xdist -n (default 0: off)")
    parser.add_argument("--loads", type=int, default=3, help="browser loads (default 3)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument(
        "--before", type=Path, help="a source tree whose report is loaded too, for before/after"
    )
    args = parser.parse_args()
    n: int = args.n
    xdist = [] if args.workers in ("", "0") else ["-n", args.workers]
    header(
        f"bench_html: {n} items with and without a self-contained pytest-html report",
        [
            f"{n} JSONL bash tasks, --llm-model=oracle, one in {FAIL_EVERY} failing; "
            f"{'-n ' + args.workers if xdist else 'no xdist'}, --tb=no",
            f"{args.rounds} interleaved rounds, no warm-up; then {args.loads} Chromium loads",
        ],
    )
    with workdir(args.keep) as tmp:
        failing = write_dataset(tmp / "tasks.jsonl", n)
        common = ["tasks.jsonl", "--llm-model=oracle", "--tb=no", *xdist]
        html = ["--html=report.html", "--self-contained-html"]
        plain = FailingRun("without --html", common, OUTCOME, n)
        report = FailingRun("with --html", [*common, *html], OUTCOME, n)
        times = measure([plain, report], tmp, args.rounds, warm=[])
        path = tmp / "report.html"
        size = path.stat().st_size
        base = statistics.median(times[plain.label])
        ours = statistics.median(times[report.label])
        print("-" * 78)
        print(f"  items: {n} ({failing} failing)")
        print(f"  report.html: {size / 1e6:.1f} MB ({size / n / 1000:.1f} KB per item)")
        print(f"  pytest without --html  {base:8.2f} s")
        print(f"  pytest with --html     {ours:8.2f} s   ratio {fmt_ratio(ours / base)}")
        print(f"  cost of the report     {(ours - base) / n * 1e3:8.3f} ms per item")
        # The browser's baseline: pytest-html's own page for N plain tests, as many failing.
        (tmp / "test_plain.py").write_text(
            f"import pytest\n\n\n@pytest.mark.parametrize('i', range({n}))\n"
            f"def test_item(i):\n    assert i % {FAIL_EVERY} != {FAIL_EVERY - 1}\n",
            encoding="utf-8",
        )
        plain_html = ["--html=baseline.html", "--self-contained-html"]
        time_run(
            FailingRun("plain tests", ["test_plain.py", "--tb=no", *plain_html], OUTCOME, n), tmp
        )
        size = (tmp / "baseline.html").stat().st_size
        print(f"  baseline page: {n} plain tests (pytest-html alone), {size / 1e6:.1f} MB")
        print("-" * 78, flush=True)
        pages = {"baseline": tmp / "baseline.html"}
        if args.before is not None:
            pages["before"] = before_report(args.before.resolve(), common, tmp)
        browse({**pages, "ours": path}, n, args.loads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
