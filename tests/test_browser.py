"""The pytest-html report in a real browser: headless Chromium driven through selenium.

The report is built by a pytester run (`--html --self-contained-html`) of a dataset with
passes, failures, a skip, an error item (a line that is not JSON) and three models: the
offline `oracle` and `nop`, and `haiku` answered by the fake LLM server, so that tokens and
cost have numbers. One task carries hostile markup in its id, category, description and in
what its commands print (stdout and stderr) and what the model says. The page is opened as
a file:// URL with no network; what is checked is what a reader sees and clicks: our columns,
a row's sections, sorting, the summary and its charts, and that no markup from a task or a
model ever runs (`window.__pwned` stays undefined, no element of ours has a script or an
event-handler attribute).

Skipped when selenium, pytest-html, Chromium or chromedriver is missing, unless
`LLMTOOL_REQUIRE_BROWSER=1` (CI sets it): then a missing browser fails the test. Kept in
`$LLMTOOL_ARTIFACTS/browser/`, or in `.artifacts/browser/` of the repository: `report.png`
(the whole page: summary, charts, the table with a row open) and `report.html`, and the page
as each test left it, `<test name>.png`.
"""

from __future__ import annotations

import base64
import importlib.util
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from fake_llm_server import FakeLLMServer, Turn
from helpers import TASKS, write_dataset

# Debian's packages; elsewhere, point these variables at a Chromium and its chromedriver.
CHROMIUM = Path(os.environ.get("LLMTOOL_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("LLMTOOL_CHROMEDRIVER", "/usr/bin/chromedriver"))
REPO = Path(__file__).resolve().parents[1]
WIDTH, HEIGHT = 1400, 1000
TIMEOUT = 20.0  # seconds any one wait may take; nothing is timed

# Markup that would set window.__pwned if a browser ever treated it as markup.
SCRIPT = "<script>window.__pwned=1</script>"
IMG = '<img src=x onerror="window.__pwned=1">'
SVG = '"><svg onload=window.__pwned=1>'
# A task id may hold no whitespace: the same tricks, written without spaces.
HOSTILE_ID = 'x<script>window.__pwned=1</script>"><svg/onload=window.__pwned=1>'
HOSTILE_PROMPT = f"Print some markup. {SCRIPT}"

COLUMNS = [
    ("llm_model", "Model"),
    ("llm_kind", "Kind"),
    ("llm_category", "Category"),
    ("llm_score", "Score"),
    ("llm_turns", "Turns"),
    ("llm_calls", "Tool calls ok/error"),
    ("llm_tokens", "Tokens"),
    ("llm_cost", "Cost"),
    ("llm_trial", "Trial"),
]
SECTIONS = {"checks", "conversation", "calls"}  # what a bash task's row holds

HOSTILE: dict[str, Any] = {
    "id": HOSTILE_ID,
    "category": IMG,
    "description": SVG,
    "prompt": HOSTILE_PROMPT,
    "expectations": [{"check": "stdout_contains:<script>"}],
    "solution": [f"printf '%s\\n' '{SCRIPT}' '{IMG}'", f"echo '{SVG}' >&2"],
}
# Nine commands: the oracle takes 10 turns (the default limit), so "10" sorts after "2" and "3".
MANY: dict[str, Any] = {
    "id": "many",
    "category": "files",
    "description": "nine steps",
    "prompt": "Count to nine.",
    "expectations": [{"check": "stdout_contains:step9"}],
    "solution": [f"echo step{i}" for i in range(1, 10)],
}
ALL_TASKS = [*TASKS, HOSTILE, MANY]
BAD_LINE = '{"id": "<script>window.__pwned=1</script>", "category": '  # not JSON: an error item
# haiku's input tokens per task: as text "12,000" < "950", as numbers the other way round.
HAIKU_TOKENS = {"alpha": 12_000, "beta": 950, "gamma": 3_000, "delta": 40, "many": 100_000}
# oracle: alpha, beta, many, hostile pass; gamma fails; delta skips (no solution).
# nop: delta passes; the rest fail. haiku replays the solutions: as oracle, and passes delta.
OUTCOMES = {"passed": 10, "failed": 7, "skipped": 1, "errors": 1}


def _haiku_script(server: FakeLLMServer) -> None:
    for task in ALL_TASKS:
        tokens = HAIKU_TOKENS.get(task["id"], 2_000)
        solution = task.get("solution") or []
        commands = [solution] if isinstance(solution, str) else solution
        turns = []
        if commands:
            turns.append(Turn(tool_calls=commands, input_tokens=tokens, output_tokens=50))
        text = f"Done. {IMG} {SVG}" if task is HOSTILE else "Done."
        turns.append(Turn(text=text, input_tokens=tokens + 100, output_tokens=10))
        server.script(task["prompt"], turns)


@pytest.fixture
def report_html(pytester: pytest.Pytester, server: FakeLLMServer) -> Path:
    """The self-contained pytest-html report of a run of `ALL_TASKS` and one bad line."""
    pytest.importorskip("pytest_html", reason="pytest-html is not installed")
    write_dataset(pytester, [*ALL_TASKS, BAD_LINE])
    _haiku_script(server)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--llm-model=oracle,nop,haiku", "--html=report.html",
        "--self-contained-html",
    )  # fmt: skip
    result.assert_outcomes(**OUTCOMES)
    return pytester.path / "report.html"


# ----------------------------------------------------------------------------- the browser


def _missing() -> str | None:
    """Why the browser test cannot run here, or None."""
    for module, package in (("selenium", "selenium"), ("pytest_html", "pytest-html")):
        if importlib.util.find_spec(module) is None:
            return f"{package} is not installed (pip install -e '.[dev]')"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"{path} is missing (apt-get install {package})"
    return None


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("LLMTOOL_REQUIRE_BROWSER") == "1":
        pytest.fail(f"LLMTOOL_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def artifacts_dir() -> Path:
    root = os.environ.get("LLMTOOL_ARTIFACTS")
    path = (Path(root) if root else REPO / ".artifacts") / "browser"
    path.mkdir(parents=True, exist_ok=True)
    return path


# Our part of the page as data: one dict per row of the results table, in the table's order.
ROWS_JS = """
return [...document.querySelectorAll('#results-table tbody.results-table-row')].map((body) => {
  const cells = {};
  body.querySelectorAll('tr.collapsible > td').forEach((td) => {
    const key = [...td.classList].find((c) => c.startsWith('col-'));
    if (key) cells[key.slice(4)] = {text: td.textContent, shown: td.innerText};
  });
  const extras = body.querySelector('tr.extras-row');
  return {result: cells.result.text, testId: cells.testId.text, cells: cells,
          collapsed: extras.classList.contains('hidden'),
          sections: [...extras.querySelectorAll('.llmtool-item details.llm-fold[data-section]')]
                      .map((d) => d.dataset.section)};
});
"""


class Browser:
    """A headless Chromium page and the few things the tests do with it."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.opened = False

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait(self, condition: Callable[[], Any], what: str) -> Any:
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.support.wait import WebDriverWait

        try:
            return WebDriverWait(self.driver, TIMEOUT, poll_frequency=0.05).until(
                lambda _: condition()
            )
        except TimeoutException:
            pytest.fail(f"waited {TIMEOUT:g} s for {what}", pytrace=False)

    def open(self, path: Path, rows: int) -> None:
        """Load the report and wait until pytest-html has drawn `rows` rows."""
        self.driver.get(path.as_uri())
        self.opened = True
        self.wait(
            lambda: (
                self.js(
                    "return document.readyState === 'complete' && "
                    "document.querySelectorAll('#results-table tbody.results-table-row').length"
                )
                == rows
            ),
            f"the page to load with {rows} rows",
        )

    def rows(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.js(ROWS_JS)
        return rows

    def row(self, test_id: str) -> dict[str, Any]:
        [row] = [r for r in self.rows() if r["testId"] == test_id]
        return row

    def row_element(self, test_id: str, selector: str) -> Any:
        """An element of the row whose Test cell reads `test_id` (as text)."""
        found = self.js(
            "const body = [...document.querySelectorAll('#results-table tbody.results-table-row')]"
            "  .find((b) => b.querySelector('td.col-testId').textContent === arguments[0]);"
            "return body ? body.querySelector(arguments[1]) : null;",
            test_id,
            selector,
        )
        assert found is not None, f"no {selector} in the row of {test_id!r}"
        return found

    def click(self, element: Any) -> None:
        self.js("arguments[0].scrollIntoView({block: 'center'});", element)
        element.click()

    def pwned(self) -> Any:
        return self.js("return window.__pwned")

    def screenshot(self, path: Path) -> None:
        """The whole page, not only the window."""
        size = self.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = self.driver.execute_cdp_cmd(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True, "clip": clip},
        )
        path.write_bytes(base64.b64decode(shot["data"]))


@pytest.fixture
def browser(request: pytest.FixtureRequest) -> Iterator[Browser]:
    """Headless Chromium through Debian's chromedriver (no Selenium Manager, no network).

    The page as each test leaves it, passed or failed, is kept as `<test name>.png`."""
    reason = _missing()
    if reason:
        _unavailable(reason)
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",  # containers' small /dev/shm
        f"--window-size={WIDTH},{HEIGHT}",
    ):
        options.add_argument(argument)
    try:
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    except WebDriverException as error:
        _unavailable(f"Chromium did not start: {error.msg}")
    page = Browser(driver)
    try:
        yield page
        if page.opened:
            page.screenshot(artifacts_dir() / f"{request.node.name}.png")
    finally:
        driver.quit()


# ------------------------------------------------------------------------------- the tests


def _node(task_id: str, model: str) -> str:
    return f"data.jsonl::{task_id}[{model}]"


def _number(cell: dict[str, Any]) -> float | None:
    """A numeric cell's value as a reader reads it: "1.5/2.5" is 0.6, "12,000" is 12000."""
    shown = cell["shown"].strip().replace(",", "").lstrip("$")
    if not shown:
        return None
    top, _, bottom = shown.partition("/")
    return float(top) / float(bottom) if bottom and float(bottom) else float(top)


def test_columns_sections_summary_and_charts(browser: Browser, report_html: Path) -> None:
    rows = sum(OUTCOMES.values())
    browser.open(report_html, rows)

    headers = browser.js(
        "return [...document.querySelectorAll('#results-table-head th')]"
        ".map((th) => [th.dataset.columnType ?? null, th.textContent, th.className])"
    )
    keys = [key for key, _, _ in headers]
    assert keys[keys.index("testId") + 1 : keys.index("testId") + 1 + len(COLUMNS)] == [
        key for key, _ in COLUMNS
    ]
    ours = {key: (text, cls) for key, text, cls in headers if key and key.startswith("llm_")}
    assert ours == {key: (title, "sortable") for key, title in COLUMNS}

    table = browser.rows()
    assert sorted(r["result"] for r in table) == sorted(
        ["Passed"] * 10 + ["Failed"] * 7 + ["Skipped"] + ["Error"]
    )
    assert all(r["collapsed"] for r in table if r["result"] == "Passed")
    assert not any(r["collapsed"] for r in table if r["result"] in ("Failed", "Error"))
    # Every finished item has our sections; the cells say what the run did.
    finished = [r for r in table if r["result"] in ("Passed", "Failed")]
    assert all(set(r["sections"]) == SECTIONS for r in finished), finished
    alpha = browser.row(_node("alpha", "haiku"))["cells"]
    assert {k: alpha[k]["shown"] for k in ("llm_model", "llm_kind", "llm_category")} == {
        "llm_model": "haiku",
        "llm_kind": "bash",
        "llm_category": "files",
    }
    assert alpha["llm_score"]["shown"] == "4/4"
    assert alpha["llm_tokens"]["shown"] == f"{12_000 + 50 + 12_100 + 10:,}"
    assert re.fullmatch(r"\$\d+\.\d{4}", alpha["llm_cost"]["shown"])
    assert browser.row(_node("many", "oracle"))["cells"]["llm_turns"]["shown"] == "10"
    error = [r for r in table if r["result"] == "Error"]
    assert error[0]["cells"]["llm_kind"]["shown"] == "bash"

    # A passed row opens on a click of its result cell and shows its sections.
    node = _node("alpha", "oracle")
    browser.click(browser.row_element(node, "td.col-result"))
    browser.wait(lambda: not browser.row(node)["collapsed"], "the passed row to expand")
    summary = browser.row_element(node, 'details[data-section="conversation"] > summary')
    assert summary.is_displayed()
    browser.click(summary)
    conversation = browser.row_element(node, 'details[data-section="conversation"]')
    browser.wait(lambda: conversation.get_attribute("open") is not None, "the fold to open")
    shown = conversation.text  # what is rendered, not merely in the DOM
    assert "Copy /in/a.txt to /out/b.txt" in shown
    assert "mkdir -p /out && cp /in/a.txt /out/b.txt" in shown
    checks = browser.row_element(node, 'details[data-section="checks"]')
    assert checks.get_attribute("open") is not None  # open from the start
    assert "file_exists:/out/b.txt" in checks.text

    # The run's tables, folded below the results.
    browser.click(
        browser.driver.find_element("css selector", 'details[data-section="tables"] > summary')
    )
    top = browser.js(
        "const s = document.querySelector('.additional-summary.postfix .llmtool-more');"
        "return s && {text: s.innerText, tables: s.querySelectorAll('table').length};"
    )
    assert top is not None, "no .llmtool-more in the summary's postfix"
    assert top["tables"] >= 2
    assert "oracle" in top["text"] and "haiku" in top["text"]
    browser.click(
        browser.driver.find_element("css selector", 'details[data-section="charts"] > summary')
    )

    charts = browser.js(
        "return [...document.querySelectorAll('figure.llmtool-chart')].map((f) => {"
        "  const svg = f.querySelector('svg'); const box = svg && svg.getBoundingClientRect();"
        "  return {name: f.dataset.chart, label: svg && svg.getAttribute('aria-label'),"
        "          width: box ? box.width : 0, height: box ? box.height : 0,"
        "          drawn: svg ? svg.querySelectorAll('path, text, use').length : 0};"
        "});"
    )
    if importlib.util.find_spec("matplotlib") is not None:
        names = {c["name"] for c in charts}
        # haiku's tokens and cost give the last two their data
        assert {"pass_rate_by_category", "turns_per_task", "context_growth"} <= names, names
        assert "cost_vs_pass_rate" in names, names
        for chart in charts:
            assert chart["label"], chart  # named for screen readers
            assert chart["width"] > 0 and chart["height"] > 0, chart
            assert chart["drawn"] > 0, chart
    else:
        assert charts == []
        assert "Charts need matplotlib" in top["text"]

    out = artifacts_dir()
    browser.screenshot(out / "report.png")
    shutil.copyfile(report_html, out / "report.html")


def test_hostile_text_is_shown_as_text_and_never_runs(browser: Browser, report_html: Path) -> None:
    browser.open(report_html, sum(OUTCOMES.values()))
    assert browser.pwned() is None

    node = _node(HOSTILE_ID, "oracle")
    row = browser.row(node)  # the Test cell reads the id as text: the match is exact
    assert row["cells"]["llm_category"]["text"] == IMG
    browser.click(browser.row_element(node, "td.col-result"))
    browser.wait(lambda: not browser.row(node)["collapsed"], "the hostile row to expand")
    browser.click(browser.row_element(node, 'details[data-section="conversation"] > summary'))
    # The tool output folds (stdout, stderr) inside the conversation: open them too.
    for fold in browser.js(
        "return [...arguments[0].querySelectorAll('details:not([open]) > summary')]",
        browser.row_element(node, 'details[data-section="conversation"]'),
    ):
        browser.click(fold)
    conversation = browser.row_element(node, 'details[data-section="conversation"]')
    shown = conversation.text
    for text in (SCRIPT, IMG, SVG, HOSTILE_PROMPT):
        assert text in shown  # rendered as text, on the screen
    assert SCRIPT in conversation.get_attribute("textContent")
    haiku = _node(HOSTILE_ID, "haiku")
    browser.click(browser.row_element(haiku, "td.col-result"))
    browser.click(browser.row_element(haiku, 'details[data-section="conversation"] > summary'))
    said = browser.row_element(haiku, 'details[data-section="conversation"]').text
    assert f"Done. {IMG} {SVG}" in said  # the model's own reply

    # Everything expanded and every fold opened: still nothing ran.
    browser.click(browser.driver.find_element("id", "show_all_details"))
    browser.wait(lambda: not any(r["collapsed"] for r in browser.rows()), "every row to expand")
    browser.js("document.querySelectorAll('details').forEach((d) => { d.open = true; })")
    assert browser.pwned() is None
    summary = browser.js("return document.querySelector('.llmtool-summary').textContent")
    assert IMG in summary  # the category, in the summary's tables, as text
    if importlib.util.find_spec("matplotlib") is not None:
        axis = browser.js(
            "return document.querySelector("
            "'figure[data-chart=\"pass_rate_by_category\"] svg').textContent"
        )
        assert '<img src=x onerror="window.' in axis  # a tick label, as text (shortened)

    page = browser.js(
        """
        const handlers = [];
        document.querySelectorAll('*').forEach((el) => {
          for (const attr of el.attributes) {
            const value = attr.value.trim().toLowerCase();
            if (attr.name.startsWith('on') || value.startsWith('javascript:'))
              handlers.push(el.tagName.toLowerCase() + '[' + attr.name + '=' + attr.value + ']');
          }
        });
        return {
          scripts: [...document.scripts].map((s) => s.textContent.includes('DataManager')),
          handlers: handlers,
          svgs: [...document.querySelectorAll('svg')].filter(
            (s) => !s.closest('figure.llmtool-chart')).length,
          imgs: [...document.querySelectorAll('img')].map((i) => i.getAttribute('src')),
          loaded: performance.getEntriesByType('resource').map((e) => e.name),
        };
        """
    )
    assert page["scripts"] == [True], "a <script> besides pytest-html's own"
    # pytest-html's "still running, reload" button is the only handler in its template.
    assert page["handlers"] == ["div[onclick=location.reload()]"], page["handlers"]
    assert page["svgs"] == 0, "an <svg> that is not one of our charts"
    assert set(page["imgs"]) <= {""}, page["imgs"]  # pytest-html's media viewer's empty <img>s
    assert page["loaded"] == [], "the self-contained page fetched something"
    assert browser.pwned() is None


def _column(browser: Browser, key: str) -> list[float | None]:
    return [_number(r["cells"][key]) for r in browser.rows()]


def _sorted_up(values: list[float | None]) -> bool:
    numbers = [v for v in values if v is not None]
    return numbers == sorted(numbers)


def test_numeric_columns_sort_as_numbers(browser: Browser, report_html: Path) -> None:
    browser.open(report_html, sum(OUTCOMES.values()))
    for key in ("llm_score", "llm_turns", "llm_tokens"):
        shown = [r["cells"][key]["shown"] for r in browser.rows() if r["cells"][key]["shown"]]
        # The data makes sorting the shown text ("1.5/2.5", "10", "12,000") differ from numbers.
        assert sorted(shown) != sorted(shown, key=lambda s: _number({"shown": s}) or 0.0), key

        # A first click on a column sorts it ascending, a second descending.
        browser.click(browser.driver.find_element("css selector", f'th[data-column-type="{key}"]'))
        up = _column(browser, key)
        assert _sorted_up(up), (key, up)
        # Empty cells (a skip, the error item) come after every number.
        empty = [v is None for v in up]
        assert empty == sorted(empty), (key, up)

        browser.click(browser.driver.find_element("css selector", f'th[data-column-type="{key}"]'))
        down = _column(browser, key)
        assert _sorted_up(down[::-1]), (key, down)
        assert sorted(v for v in up if v is not None) == sorted(v for v in down if v is not None)


def _top(browser: Browser, selector: str) -> float:
    """Where the first element `selector` finds starts on the page, in CSS pixels."""
    found = browser.js(
        "const e = document.querySelector(arguments[0]);"
        "return e && e.getBoundingClientRect().top + window.scrollY;",
        selector,
    )
    assert found is not None, f"no {selector} on the page"
    return float(found)


def _shown(browser: Browser, selector: str) -> list[str]:
    """The first cell's text of each displayed element `selector` finds."""
    shown: list[str] = browser.js(
        "return [...document.querySelectorAll(arguments[0])]"
        "  .filter((e) => e.checkVisibility())"
        "  .map((e) => e.querySelector('th, td.col-testId').textContent);",
        selector,
    )
    return shown


def test_the_verdict_and_the_matrix_come_first_and_filter(
    browser: Browser, report_html: Path
) -> None:
    """Issue 22: the banner and the task x model matrix stand above the first results row
    (the screenshot `triage.png` shows them on the first screen); the CSS-only filter finds
    the tasks where two models differ and every failure of one category."""
    browser.open(report_html, sum(OUTCOMES.values()))
    banner = _top(browser, ".llm-banner")
    matrix = _top(browser, ".llm-matrix")
    first_row = _top(browser, "#results-table tbody.results-table-row")
    assert banner < matrix < first_row
    assert first_row < HEIGHT, "the results start below the first screen"
    assert _top(browser, "#environment") > first_row  # pytest-html's box: at the end
    text = browser.js("return document.querySelector('.llm-banner').innerText")
    assert "haiku" in text and "Exit status 1" in text
    headings = browser.js(
        "return [...document.querySelectorAll('h2')].filter((h) => h.checkVisibility())"
        ".map((h) => h.textContent)"
    )
    # pytest-html's "Summary" heading is hidden; the one in the folded tables is not shown.
    assert "Summary" not in headings and "LLM evaluation" in headings, headings
    browser.driver.execute_script("window.scrollTo(0, 0)")
    browser.driver.save_screenshot(str(artifacts_dir() / "triage.png"))

    everything = _shown(browser, "tr.llm-row")
    # nop fails what oracle and haiku pass: those rows come first.
    browser.click(browser.driver.find_element("id", "llm-show-split"))
    split = _shown(browser, "tr.llm-row")
    assert split and split == everything[: len(split)] and len(split) < len(everything)
    assert "data.jsonl::alpha" in split and "data.jsonl::gamma" not in split
    # haiku passed, nop failed: the same tasks here.
    browser.click(browser.driver.find_element("id", "llm-show-all"))
    columns = browser.js(
        "return [...document.querySelectorAll('.llm-matrix thead th')].map((t) => t.textContent)"
    )[2:]
    browser.click(browser.driver.find_element("id", f"llm-col{columns.index('haiku')}-pass"))
    browser.click(browser.driver.find_element("id", f"llm-col{columns.index('nop')}-fail"))
    assert set(_shown(browser, "tr.llm-row")) == set(split) - {"data.jsonl::delta"}

    # Every failure of one category: the matrix narrows to it, and its cells lead to the rows.
    for n in range(len(columns)):
        browser.click(browser.driver.find_element("id", f"llm-col{n}-any"))
    category = browser.js(
        "return [...document.querySelectorAll('input[name=llm-cat]')]"
        "  .find((i) => i.parentElement.textContent === 'text').id"
    )
    browser.click(browser.driver.find_element("id", category))
    browser.click(browser.driver.find_element("id", "llm-show-fail"))
    assert set(_shown(browser, "tr.llm-row")) == {"data.jsonl::beta", "data.jsonl::gamma"}

    # A cell opens its row: the link lands on the item's row of the results table.
    link = browser.js(
        "return [...document.querySelectorAll('td.llm-fail a')].find((a) => a.checkVisibility())"
    )
    target = browser.js("return decodeURIComponent(arguments[0].hash.slice(1))", link)
    browser.click(link)
    browser.wait(
        lambda: browser.js("return decodeURIComponent(location.hash.slice(1))") == target,
        "the link to be followed",
    )
    assert browser.js("return document.getElementById(arguments[0]) !== null", target)
    assert browser.pwned() is None
