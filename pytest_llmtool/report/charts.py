"""Charts of a run report, as SVG elements to inline in an HTML page (matplotlib, optional).

SVG with text kept as text (`svg.fonttype: none`): the charts sit inside a report page, so
they should be small, sharp at any zoom and searchable. matplotlib is imported lazily and only
here, so the plugin imports fast and works without it (`charts()` then returns nothing).

Only the object API is used (a `Figure` of its own, saved with `savefig`): pyplot keeps
figures in global state, and the plugin runs inside someone else's process. The settings go
through `rc_context` over matplotlib's default style, so a user's `matplotlibrc` changes
nothing and the same report gives byte-identical SVGs (`svg.hashsalt` fixes the ids, no
date). `rc_context` does swap the global `rcParams` while a chart is drawn: do not draw
charts from two threads at once.

Category, model, scenario and agent names are hostile data: matplotlib escapes `&`, `<` and
`>` in SVG text, `text.parse_math: False` keeps a `$` from starting math, and `label()` drops
what XML cannot hold (control characters) and shortens long names.
"""

from __future__ import annotations

import html
import io
import math
import unicodedata
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_llmtool.records import (
    AgentTrace,
    EvalReport,
    Interval,
    ScenarioResult,
    TaskResult,
    agent_model,
)
from pytest_llmtool.report.store import ResultStore
from pytest_llmtool.stats import intervals
from pytest_llmtool.stats.trials import attempt_of

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Chart:
    """One chart: `name` is its file stem (`[a-z_]+`), `svg` an `<svg>` element to inline."""

    name: str
    title: str
    svg: str


# Okabe and Ito's palette, told apart with every common colour-vision deficiency. A model
# keeps its colour (and marker) in every chart of a report: its place in the run's models.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", ":", "-.")
REFERENCE = "#777777"
ERRORBAR: dict[str, Any] = {"ecolor": "#333333", "elinewidth": 0.8, "capsize": 2}
MAX_LABEL = 30
LEGEND_CHARS = 90  # what one line of the legend holds, handles and gaps counted
WIDTH = 7.5  # inches; heights grow with what a chart shows
MIN_HEIGHT = 2.6
# Unicode categories a label drops: control, format (bidi overrides), surrogate, private use
# and unassigned (U+FFFE, U+FFFF): XML cannot hold some, and none is meant to be read.
_DROPPED = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})


def available() -> bool:
    """Whether matplotlib can be imported (the `charts` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def charts(report: EvalReport, traced: Traced | None = None) -> list[Chart]:
    """Every chart the report has data for, in a fixed order; [] without matplotlib. `traced`
    is what was gathered off the report's results, if it was (else it is, when needed)."""
    if not available():
        return []
    palette = _Palette(report)
    traced = traced if traced is not None else Traced(report)
    drawn = (_render(name, title, draw, report, palette, traced) for name, title, draw in _CHARTS)
    return [chart for chart in drawn if chart is not None]


def charts_or_reason(
    report: EvalReport, traced: Traced | None = None
) -> tuple[list[Chart], str | None]:
    """The charts, or none and why: a chart that cannot be drawn must not cost the report
    it sits in (the HTML page, `report.md`)."""
    try:
        return charts(report, traced), None
    except Exception as exc:  # any failure of a plotting library
        return [], f"charts could not be drawn: {type(exc).__name__}: {exc}"


def label(value: object) -> str:
    """A name from the data as one short line: what XML cannot hold dropped, whitespace
    collapsed, an ellipsis past `MAX_LABEL` characters, `(none)` when nothing is left."""
    kept = "".join(
        " " if ch.isspace() else ch
        for ch in str(value)
        if ch.isspace() or unicodedata.category(ch) not in _DROPPED
    )
    text = " ".join(kept.split())
    if len(text) > MAX_LABEL:
        text = text[: MAX_LABEL - 1].rstrip() + "\u2026"
    return text or "(none)"


class _Palette:
    """Colours and markers by model, in the order the run named its models."""

    def __init__(self, report: EvalReport) -> None:
        names = [m.name for m in report.metadata.models]
        names += [*report.by_model, *report.scenario_summary]
        names += [model for by_model in report.trials.values() for model in by_model]
        if report.optimization is not None:
            names += [agent_model(agent) for agent in report.optimization.by_agent]
        self._index = {name: i for i, name in enumerate(dict.fromkeys(names))}

    def _place(self, model: str) -> int:
        return self._index.setdefault(model, len(self._index))

    def colour(self, model: str) -> str:
        return PALETTE[self._place(model) % len(PALETTE)]

    def marker(self, model: str) -> str:
        return MARKERS[self._place(model) % len(MARKERS)]

    def order(self, models: Iterable[str]) -> list[str]:
        return sorted(set(models), key=lambda m: (self._place(m), m))


# A chart and what it counts (`n = 51 bash task runs`), said in its title.
Drawn = tuple["Figure", str]
Draw = Callable[[EvalReport, _Palette, "Traced"], "Drawn | None"]


def _n(count: int, noun: str) -> str:
    return f"n = {count:,} {noun}"


def _n_each(counts: Iterable[int], noun: str) -> str:
    """`n = 5 tasks each`, or `n = 3-5 tasks each` when the series differ."""
    low, high = min(counts), max(counts)
    shown = f"{low:,}" if low == high else f"{low:,}\u2013{high:,}"
    return f"n = {shown} {noun} each"


def _render(
    name: str, title: str, draw: Draw, report: EvalReport, palette: _Palette, traced: Traced
) -> Chart | None:
    """Draw one chart under our settings and save it as SVG; None when it has no data."""
    import matplotlib
    import matplotlib.style

    with (
        matplotlib.style.context("default"),
        matplotlib.rc_context(
            {
                "svg.fonttype": "none",
                "text.parse_math": False,
                "svg.hashsalt": name,
                # Text is measured with DejaVu Sans (bundled with matplotlib, so the layout is
                # the same everywhere); a browser without it falls back to narrower fonts.
                "font.family": "sans-serif",
                "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica"],
                "font.size": 9,
                "axes.spines.top": False,
                "axes.spines.right": False,
                "axes.axisbelow": True,
                "grid.color": "#dddddd",
                "grid.linewidth": 0.6,
            }
        ),
        warnings.catch_warnings(),
    ):
        # A name in a script DejaVu Sans lacks (CJK): the browser draws it with its own fonts.
        warnings.filterwarnings("ignore", "Glyph .* missing from", UserWarning)
        drawn = draw(report, palette, traced)
        if drawn is None:
            return None
        figure, counted = drawn
        title = f"{title} ({counted})"
        figure.suptitle(title, fontsize=11)
        out = io.StringIO()
        figure.savefig(out, format="svg", metadata={"Date": None})
    return Chart(name, title, _inline(out.getvalue(), name, title))


def _inline(svg: str, name: str, title: str) -> str:
    """The `<svg>` element alone, fit to be one of several in a page: no XML prolog or
    DOCTYPE; shrinking to fit its container (the viewBox keeps the proportions); with an id,
    and named for screen readers; matplotlib's catch-all `*{...}` stylesheet scoped to this
    chart, so it does not reach the rest of the page; its group ids (`figure_1`, `axes_1`:
    the same in every chart, unlike the salted ones of clip paths and markers) prefixed with
    the chart's id. Text content cannot hold a raw `<`, so the replacements only meet markup."""
    root = f"llmtool-chart-{name}"
    svg = svg[svg.index("<svg") :].strip()
    svg = svg.replace('<style type="text/css">*{', f'<style type="text/css">#{root} *{{', 1)
    svg = svg.replace('<g id="', f'<g id="{root}-')
    attributes = (
        f'id="{root}" role="img" aria-label="{html.escape(title)}" '
        'style="max-width: 100%; height: auto"'
    )
    return svg.replace("<svg ", f"<svg {attributes} ", 1)


def _axes(height: float) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH, max(MIN_HEIGHT, height)), layout="constrained")
    return figure, figure.add_subplot()


def _legend(ax: Axes, handles: Sequence[Artist], labels: Sequence[str]) -> None:
    """Above the plot, out of the data's way and under the title (the layout makes room for
    an axes' legend, not for a figure's beside the title), in as many columns as fit the
    width (a wider legend would squeeze the plot). Labels are given explicitly, so a name
    starting with `_` is not taken for matplotlib's 'leave me out of the legend'."""
    ax.legend(
        list(handles),
        list(labels),
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        ncols=max(1, min(4, len(labels), LEGEND_CHARS // (max(map(len, labels)) + 6))),
        frameon=False,
    )


def _spread(
    points: Sequence[tuple[float, Interval | None]], scale: float = 100.0
) -> list[list[float]]:
    """Error-bar lengths below and above each value, as matplotlib wants them (never
    negative, even when a value sits outside its interval's bounds); NaN draws no bar."""
    below = [scale * max(0.0, v - i.low) if i else math.nan for v, i in points]
    above = [scale * max(0.0, i.high - v) if i else math.nan for v, i in points]
    return [below, above]


def _log_axis(axis: Axis, low: float, high: float, unit: Callable[[float], str]) -> None:
    """Ticks at 1, 2 and 5 of each decade (only 1 over many decades), written plainly:
    matplotlib's own log labels are math text, which `text.parse_math: False` shows raw."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    steps = (1, 2, 5) if last - first <= 3 else (1,)
    ticks = [s * 10.0**e for e in range(first, last + 1) for s in steps]
    axis.set_major_locator(FixedLocator([t for t in ticks if low <= t <= high]))
    axis.set_major_formatter(FuncFormatter(lambda v, _: unit(v)))
    axis.set_minor_locator(NullLocator())


def _grouped_bars(
    cells: dict[tuple[str, str], tuple[float, Interval | None]],
    palette: _Palette,
    xlabel: str,
    ylabel: str = "",
) -> Figure:
    """Horizontal bars of rates (0 to 1) by (group, model): a group a row, a bar a model.

    Horizontal, so that long group names read level and many groups just make the chart
    taller; the height grows with the bars it holds."""
    groups = sorted({group for group, _ in cells})
    models = palette.order(model for _, model in cells)
    row = {group: i for i, group in enumerate(groups)}
    bar = 0.8 / len(models)
    figure, ax = _axes(1.2 + len(groups) * (0.16 * len(models) + 0.14))
    handles = []
    for i, model in enumerate(models):
        found = [(group, cells[group, model]) for group in groups if (group, model) in cells]
        ys = [row[group] + (i - (len(models) - 1) / 2) * bar for group, _ in found]
        values = [100 * value for _, (value, _) in found]
        bars = ax.barh(
            ys,
            values,
            height=bar,
            xerr=_spread([point for _, point in found]),
            color=palette.colour(model),
            error_kw=ERRORBAR,
        )
        handles.append(bars.patches[0])
    ax.set_yticks(range(len(groups)), [label(group) for group in groups])
    ax.set_ylim(len(groups) - 0.5, -0.5)
    ax.set_xlim(0, 100)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, axis="x")
    _legend(ax, handles, [label(model) for model in models])
    return figure


class Traced:
    """What the charts read off the traces, gathered in one pass over the results when a chart
    first asks: the results are decoded as they are read (`report/store.py`), so a large
    run's are not decoded once per chart. A writer may instead have it fed result by result
    as another pass reads them (`read_along`), and hand it to `charts` fed."""

    def __init__(self, report: EvalReport | None = None) -> None:
        self._report = report
        # Input tokens by model and call number, of the runs that count tokens.
        self._tokens: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
        self._counted_runs = 0
        self._tool_calls: dict[str, list[int]] = defaultdict(list)  # per bash task, by model

    def read_along(self, stores: Mapping[str, ResultStore[Any]]) -> Callable[[], bool]:
        """Be fed the bash tasks' and scenarios' results by the stores' next passes; the
        check says whether both passes reached their ends."""
        checks = [
            store.read_along(read)
            for name, read in (("bash", self.task), ("scenario", self.scenario))
            if (store := stores.get(name)) is not None
        ]
        return lambda: all(check() for check in checks)

    def task(self, result: TaskResult) -> None:
        self._tool_calls[result.model].append(result.trace.tool_call_count)
        self._count_tokens(result.model, result.trace)

    def scenario(self, result: ScenarioResult) -> None:
        if result.trace is not None:
            self._count_tokens(result.model, result.trace)

    def _gather(self) -> None:
        report, self._report = self._report, None
        if report is None:  # gathered, or fed
            return
        for r in report.results:
            self.task(r)
        for s in report.scenarios:
            self.scenario(s)

    def _count_tokens(self, model: str, trace: AgentTrace) -> None:
        if any(call.input_tokens for call in trace.llm_calls):
            self._counted_runs += 1
            for call in trace.llm_calls:
                if call.usage_reported:  # an unreported call's 0 is no context size
                    self._tokens[model][call.call_number].append(call.input_tokens)

    def tokens(self) -> tuple[dict[str, dict[int, list[int]]], int]:
        """Input tokens by model and call number (bash tasks and scenarios), and how many
        runs they come from; runs without token counts are left out."""
        self._gather()
        return self._tokens, self._counted_runs

    def tool_calls(self) -> dict[str, list[int]]:
        """Tool calls per bash task, by model."""
        self._gather()
        return self._tool_calls


def _rate(share: float, interval: Interval | None) -> float:
    """A pass rate as every output shows it: its interval's estimate, the mean over tasks
    (the share of items leans towards tasks with more attempts), else the share."""
    return share if interval is None else interval.estimate


def _pass_rate_by_category(report: EvalReport, palette: _Palette, traced: Traced) -> Drawn | None:
    """Where each model fails: bash pass rate by category, with the 95% interval."""
    counted = [
        (category, model, c)
        for model, summary in report.by_model.items()
        for category, c in summary.by_category.items()
        if c.tasks
    ]
    if not counted:
        return None
    cells = {
        (category, model): (_rate(c.passed / c.tasks, c.pass_rate_ci), c.pass_rate_ci)
        for category, model, c in counted
    }
    figure = _grouped_bars(cells, palette, "tasks passed (%), 95% interval")
    return figure, _n(sum(c.tasks for _, _, c in counted), "bash task runs")


def _context_growth(report: EvalReport, palette: _Palette, traced: Traced) -> Drawn | None:
    """How fast the prompt grows call by call: what makes long tasks expensive. Later call
    numbers average over fewer (the longer) tasks. Runs without token counts (offline
    models report 0 for every call) are left out rather than averaged in as zeros."""
    from matplotlib.ticker import MaxNLocator, StrMethodFormatter

    tokens, runs = traced.tokens()
    if not tokens:
        return None
    figure, ax = _axes(4.2)
    models = palette.order(tokens)
    handles = []
    for model in models:
        calls = sorted(tokens[model])
        means = [sum(tokens[model][c]) / len(tokens[model][c]) for c in calls]
        colour, marker = palette.colour(model), palette.marker(model)
        handles += ax.plot(calls, means, color=colour, marker=marker, markersize=4)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.set_ylim(bottom=0)
    ax.set(xlabel="model call within a task", ylabel="mean input tokens")
    ax.grid(True)
    _legend(ax, handles, [label(m) for m in models])
    return figure, _n(runs, "runs with token counts")


def _cost_vs_pass_rate(report: EvalReport, palette: _Palette, traced: Traced) -> Drawn | None:
    """What a model's pass rate costs: one point per model and kind, cost per task run
    (judge calls included) against pass rate with its interval."""
    runs = sum(s.total_tasks for s in report.by_model.values() if s.total_cost_usd is not None)
    runs += sum(
        s.scenarios for s in report.scenario_summary.values() if s.usage.cost_usd is not None
    )
    points: list[tuple[str, str, float, float, Interval | None]] = [
        (
            model,
            "bash tasks",
            s.total_cost_usd / s.total_tasks,
            _rate(s.pass_rate, s.pass_rate_ci),
            s.pass_rate_ci,
        )
        for model, s in report.by_model.items()
        if s.total_cost_usd is not None and s.total_tasks
    ]
    points += [
        (
            model,
            "scenarios",
            s.usage.cost_usd / s.scenarios,
            _rate(s.passed / s.scenarios, s.pass_rate_ci),
            s.pass_rate_ci,
        )
        for model, s in report.scenario_summary.items()
        if s.usage.cost_usd is not None and s.scenarios
    ]
    if not points:
        return None
    several = len({kind for _, kind, *_ in points}) > 1
    figure, ax = _axes(4.2)
    handles, names = [], []
    for model, kind, cost, rate, interval in points:
        drawn = ax.errorbar(
            [cost],
            [100 * rate],
            yerr=_spread([(rate, interval)]),
            color=palette.colour(model),
            fmt="o" if kind == "bash tasks" else "s",
            markersize=7,
            **ERRORBAR,
        )
        handles.append(drawn.lines[0])
        names.append(f"{label(model)}, {kind}" if several else label(model))
    costs = [cost for _, _, cost, _, _ in points]
    if min(costs) > 0 and max(costs) / min(costs) >= 10:
        ax.set_xscale("log")
        ax.set_xlim(min(costs) / 1.5, max(costs) * 1.5)
        _log_axis(ax.xaxis, min(costs) / 1.5, max(costs) * 1.5, lambda v: f"${v:g}")
    else:
        ax.set_xlim(0, max(costs) * 1.15 or 1)
        ax.xaxis.set_major_formatter(lambda v, _: f"${v:.3g}")
    ax.set_ylim(-3, 103)
    ax.set(xlabel="cost per task run (USD)", ylabel="passed (%), 95% interval")
    ax.grid(True)
    _legend(ax, handles, names)
    return figure, _n(runs, "priced runs")


def _pass_at_k(report: EvalReport, palette: _Palette, traced: Traced) -> Drawn | None:
    """How much repeated attempts help: pass@k against k, per model (line style per kind)."""
    kinds = sorted(report.trials)
    series = [
        (kind, model, report.trials[kind][model])
        for kind in kinds
        for model in palette.order(report.trials[kind])
        if report.trials[kind][model].pass_at_k
    ]
    if not series:
        return None
    several = len({kind for kind, _, _ in series}) > 1
    step = min(0.05, 0.4 / len(series))  # nudged sideways, so intervals do not overlap
    figure, ax = _axes(4.2)
    handles, names = [], []
    for i, (kind, model, s) in enumerate(series):
        ks = sorted(s.pass_at_k)
        nudge = (i - (len(series) - 1) / 2) * step
        drawn = ax.errorbar(
            [k + nudge for k in ks],
            [100 * s.pass_at_k[k] for k in ks],
            yerr=_spread([(s.pass_at_k[k], s.pass_at_k_ci.get(k)) for k in ks]),
            color=palette.colour(model),
            marker=palette.marker(model),
            markersize=5,
            linestyle=LINESTYLES[kinds.index(kind) % len(LINESTYLES)],
            **ERRORBAR,
        )
        handles.append(drawn.lines[0])
        names.append(f"{label(model)}, {label(kind)}" if several else label(model))
    ax.set_xticks(sorted({k for _, _, s in series for k in s.pass_at_k}))
    ax.set_ylim(-3, 103)
    ax.set(xlabel="k (attempts per task)", ylabel="pass@k (%), 95% interval")
    ax.grid(True)
    _legend(ax, handles, names)
    return figure, _n_each([s.tasks for _, _, s in series], "tasks")


def _speedups(report: EvalReport, palette: _Palette, traced: Traced) -> Drawn | None:
    """Did the agents make the code faster: the typical speedup per agent against 1x
    (unchanged), on a log scale once the values span a factor of 4 (a speedup is a ratio).
    With an interval the point is its estimate, the geometric mean over tasks (`log-t`,
    always above 0, so the whisker stays on the axis); without one, the mean speedup."""
    by_agent = report.optimization.by_agent if report.optimization else {}
    agents = [
        (a, s.mean_speedup_ci.estimate if s.mean_speedup_ci else s.mean_speedup, s.mean_speedup_ci)
        for a, s in sorted(by_agent.items())
    ]
    shown = [(a, v, i) for a, v, i in agents if v is not None and v > 0]
    if not shown:
        return None
    figure, ax = _axes(1.2 + 0.4 * len(shown))
    bounds = [1.0] + [x for _, v, i in shown for x in (v, *((i.low, i.high) if i else ()))]
    low, high = min(x for x in bounds if x > 0) / 1.5, max(bounds) * 1.5
    for row, (agent, value, interval) in enumerate(shown):
        clipped = interval.model_copy(update={"low": max(interval.low, low)}) if interval else None
        ax.errorbar(
            [value],
            [row],
            xerr=_spread([(value, clipped)], scale=1.0),
            fmt="o",
            color=palette.colour(agent_model(agent)),
            markersize=6,
            **ERRORBAR,
        )
    ax.axvline(1.0, color=REFERENCE, linestyle="--", linewidth=1)
    if high / low >= 4:
        ax.set_xscale("log")
        _log_axis(ax.xaxis, low, high, lambda v: f"{v:g}x")
    else:
        ax.xaxis.set_major_formatter(lambda v, _: f"{v:g}x")
    ax.set_xlim(low, high)
    ax.set_yticks(range(len(shown)), [label(agent) for agent, _, _ in shown])
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.set_xlabel("mean speedup over the untouched code, 95% interval (dashed: 1x)")
    ax.grid(True, axis="x")
    return figure, _n_each([by_agent[a].tasks for a, _, _ in shown], "tasks")


def _horizontal() -> dict[str, Any]:
    """A horizontal box plot's keyword: `orientation` since matplotlib 3.10, which deprecates
    the `vert` of the older ones (the `charts` extra allows 3.8)."""
    import matplotlib

    if matplotlib.__version_info__ >= (3, 10):
        return {"orientation": "horizontal"}
    return {"vert": False}


def _turns_per_task(report: EvalReport, palette: _Palette, traced: Traced) -> Drawn | None:
    """How much each model works per bash task: the spread of tool calls per task (a box per
    model; whiskers reach the extremes, so the chart's size does not grow with the tasks).
    Bash tasks only: a scenario's commands are another measure, counted in its own
    interaction metrics."""
    from matplotlib.ticker import MaxNLocator

    counts = traced.tool_calls()
    if not any(any(c) for c in counts.values()):
        return None
    models = palette.order(counts)
    figure, ax = _axes(1.3 + 0.45 * len(models))
    boxes = ax.boxplot(
        [counts[m] for m in models],
        **_horizontal(),
        whis=(0, 100),
        widths=0.6,
        showmeans=True,
        patch_artist=True,
        medianprops={"color": "black"},
        meanprops={"marker": "^", "markerfacecolor": "white", "markeredgecolor": "black"},
    )
    for box, model in zip(boxes["boxes"], models, strict=True):
        box.set_facecolor(palette.colour(model))
    ax.set_yticks(range(1, len(models) + 1), [f"{label(m)} (n={len(counts[m])})" for m in models])
    ax.set_ylim(len(models) + 0.5, 0.5)
    ax.set_xlim(left=-0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(
        "tool calls per task (box: quartiles and median, triangle: mean, whiskers: range)"
    )
    ax.grid(True, axis="x")
    return figure, _n(sum(len(c) for c in counts.values()), "bash task runs")


def _scenario_gates(report: EvalReport, palette: _Palette, traced: Traced) -> Drawn | None:
    """How close the models come on scenarios: the share of gates passed, by guidance
    document when the run had some (the interval is over scenarios, attempts clustered)."""
    guided = any(s.guidance for s in report.scenarios)
    gates: dict[tuple[str, str], dict[str, list[tuple[float, float]]]]
    gates = defaultdict(lambda: defaultdict(list))
    runs = 0
    for s in report.scenarios:
        runs += 1 if s.evaluation.gates_total else 0
        group = (s.guidance or "") if guided else "all scenarios"
        ev = s.evaluation
        gates[group, s.model][attempt_of(s)].append((ev.gates_passed, ev.gates_total))
    cells = {}
    for key, parts in gates.items():
        passed = sum(p for pairs in parts.values() for p, _ in pairs)
        total = sum(t for pairs in parts.values() for _, t in pairs)
        if total:
            cells[key] = (passed / total, intervals.ratio(parts))
    if not cells:
        return None
    by = "guidance document" if guided else ""
    figure = _grouped_bars(cells, palette, "gates passed (%), 95% interval", by)
    return figure, _n(runs, "scenario runs with gates")


_CHARTS: tuple[tuple[str, str, Draw], ...] = (
    ("pass_rate_by_category", "Bash tasks passed by category", _pass_rate_by_category),
    ("context_growth", "Input tokens per model call", _context_growth),
    ("cost_vs_pass_rate", "Cost per task against pass rate", _cost_vs_pass_rate),
    ("pass_at_k", "pass@k over repeated attempts", _pass_at_k),
    ("speedups", "Optimization: mean speedup per agent", _speedups),
    ("turns_per_task", "Tool calls per bash task", _turns_per_task),
    ("scenario_gates", "Scenario gates passed", _scenario_gates),
)
