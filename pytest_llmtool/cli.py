"""`llmtool`: read the run history from the command line; `llmtool gaps` replays recorded
runs on the current bashkit and writes their gap report; `llmtool judge calibrate` checks a
judge against people's labels or an ax-eval calibration suite (`calibrate.py`, exit status 9
when it drifted from them or a case is out of band, 7 when there are too few labels or no
scored case to tell, 2 when a label or case cannot be read).

`llmtool history list` (or `llmtool history`), `llmtool history trend`, `llmtool history show
RUN_ID`: a table by default, JSON with `--json` (for scripts and dashboards). `llmtool history
report RUN_ID` prints a run's `report.json` as the history keeps it (compressed in the
database). The database is
the one the plugin writes: `llm_history` of the ini file pytest finds from here, relative to
its rootdir, unless `--db` names another. Exit status 0, or 2 with a one-line message when the
database or the run is not there. Output piped into `head` ends quietly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pytest_llmtool import history
from pytest_llmtool.agents.base import AgentError
from pytest_llmtool.gaps import ReplayError
from pytest_llmtool.report.costs import UNKNOWN
from pytest_llmtool.report.terminal import format_table

# The columns of a model's figures, headed as every output heads them.
FIGURES = ["Passed", "Pass rate [95% CI]", "Errors"]


def _figures(rate: dict[str, Any] | None) -> list[str]:
    """A model's figures (`history.rate`) as cells: passed of scored items, the pass rate
    with its interval as every output shows it (`shown`), errors."""
    if rate is None:
        return ["-", "-", "-"]
    return [f"{rate['passed']}/{rate['scored']}", rate["shown"], str(rate["errors"])]


def _list(args: argparse.Namespace) -> tuple[Any, list[str]]:
    """One row per run and model; a run's own columns on its first row only; with a run
    of trials, each model's tasks meeting the per-task rule."""
    runs = history.runs(args.db)
    rule = any(met for run in runs for met in run["tasks_met"].values())
    rows = []
    for run in runs:
        own = [
            str(run["id"]),
            run["started"],
            ", ".join(run["datasets"]) or "-",
            str(run["items"]) + (" PARTIAL" if run["complete"] is False else ""),
            str(run["exit_status"]),
        ]
        for n, model in enumerate(run["models"] or ["-"]):
            cells = own if n == 0 else [""] * len(own)
            figures = _figures(run["pass_rate"].get(model))
            if rule:
                met = run["tasks_met"].get(model)
                figures.append("-" if met is None else met["shown"])
            rows.append([*cells[:3], model, *figures, *cells[3:]])
    headers = ["Run", "Started", "Datasets", "Model", *FIGURES, *["Tasks"] * rule, "Items", "Exit"]
    return runs, format_table(headers, rows, left=4)


def _trend(args: argparse.Namespace) -> tuple[Any, list[str]]:
    points = history.trend(args.db, args.model, args.category, args.task, args.by)
    extra = [] if args.by == "model" else [args.by.capitalize()]
    headers = ["Run", "Started", "Model", *extra, *FIGURES[:2]]
    rows = [
        [
            str(p["run"]),
            p["started"],
            p["model"],
            *([p[args.by]] if extra else []),
            *_figures(p)[:2],
        ]
        for p in points
    ]
    return points, format_table(headers, rows, left=3 + len(extra))


def _item_cost(item: dict[str, Any], identities: dict[str, Any]) -> str:
    """An item's cost cell: `unknown` when a call of a real model had no price (or no usage),
    never a `-` that reads as nothing spent; an offline agent's items call no model (`-`)."""
    if item["cost_usd"] is not None:
        return f"${item['cost_usd']:.4f}"
    offline = identities.get(item["model"], {}).get("provider") == "offline"
    return "-" if offline else UNKNOWN


def _show(args: argparse.Namespace) -> tuple[Any, list[str]]:
    run = history.show(args.db, args.run)
    lines = [*([run["partial"]] if run["partial"] else [])]
    lines += [
        f"run {run['id']}: {run['started']} to {run['finished']}, exit status "
        f"{run['exit_status']}, pytest-llmtool {run['plugin']}",
        "command line: " + " ".join(run["command_line"]),
    ]
    for name, identity in run["identities"].items():
        unknown = "" if identity["resolved"] else " (endpoint and parameters not recorded)"
        lines.append(f"{name} = {identity['said']}{unknown}")
    lines += [*([run["gate"]] if run["gate"] else []), ""]
    lines += format_table(
        ["Model", *FIGURES], [[m, *_figures(r)] for m, r in run["pass_rate"].items()]
    )
    items = [
        [
            item["nodeid"],
            item["outcome"],
            "-" if item["score"] is None else f"{item['score']:g}/{item['max_score']:g}",
            _item_cost(item, run["identities"]),
        ]
        for item in run["items"]
    ]
    if run["task_verdicts"]:
        verdicts = [
            [v["task"], v["model"], v["verdict"].upper(), v["shown"], "flaky" * v["flaky"]]
            for v in run["task_verdicts"]
        ]
        headers = ["Task", "Model", f"Verdict ({run['task_rule']})", "Passed", "Flaky"]
        lines += ["", *format_table(headers, verdicts, left=3)]
    lines += ["", *format_table(["Item", "Outcome", "Score", "Cost"], items)]
    return run, lines


def _report(args: argparse.Namespace) -> tuple[Any, list[str]]:
    _, text = history.stored_report(args.db, args.run)
    return json.loads(text), [text]


def _gaps(args: argparse.Namespace) -> tuple[Any, list[str]]:
    """The gap report of recorded runs and their replay on the current bashkit, written
    to `--out` (gaps.json, gaps.md); the top of it printed."""
    from pytest_llmtool.gaps import writer as pages
    from pytest_llmtool.gaps.replay import recorded_gaps

    report = recorded_gaps(args.reports, args.dataset, run_replay=not args.no_replay)
    paths = pages.write(report, args.out)
    lines = [pages.terminal_line(report, paths)]
    if report.gaps:
        shown = report.gaps[: args.top]
        rows = [[pages.plain(g.key), str(g.calls), str(g.task_count)] for g in shown]
        headers = ["Gap", "Calls", "Tasks"]
        likely = [pages.plain(pages.likely_cell(g)) for g in shown]
        if any(likely):
            # Last, and flush left as a name is (`format_table` sets all but the first column
            # flush right): each cell padded to the column's width.
            wide = len(max(["Likely tool gap", *likely], key=len))
            headers.append("Likely tool gap".ljust(wide))
            rows = [[*row, cell.ljust(wide)] for row, cell in zip(rows, likely, strict=True)]
        lines += ["", *format_table(headers, rows)]
    replay = report.replay
    if replay is not None and replay.gaps:
        rows = [
            [pages.plain(g.key), str(g.then), str(g.now), g.status] for g in replay.gaps[: args.top]
        ]
        lines += [
            "",
            f"replayed {replay.attempts} task attempts ({replay.calls} calls) on bashkit "
            f"{replay.bashkit_now}; tasks looked up by {pages.plain(replay.dataset_rule)}",
            *format_table(["Gap", "Then", "Now", "Status"], rows),
        ]
    if replay is not None and replay.not_replayed:
        lines += ["", f"not replayed: {len(replay.not_replayed)} attempts (see gaps.md)"]
    return report.model_dump(mode="json"), lines


def _calibrate(args: argparse.Namespace) -> tuple[Any, list[str], int]:
    """The judge against a labels file (agreement, kappa, alpha, leniency, order bias) or an
    ax-eval suite (each case in its band or not, the leniency index)."""
    from pytest_llmtool.history import calibrate

    try:
        gate = calibrate.parse_gate(args.min_agreement) if args.min_agreement else None
        found = calibrate.run_command(
            args.labels,
            [name for name in args.judge_model.split(",") if name.strip()],
            samples=args.samples,
            gate=gate,
            max_cost=args.max_cost,
            order_check=not args.no_order_check,
        )
    except (ValueError, calibrate.LabelsError) as exc:
        raise CommandError(str(exc)) from None
    except AgentError as exc:  # the judge could not be asked (a provider error, the budget)
        raise CommandError(f"judge calibration stopped: {exc}") from None
    return found.model_dump(mode="json"), calibrate.lines(found), found.status


class CommandError(Exception):
    """A command's input cannot be used; exit status 2 with the message."""


def _positive(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return int(text)


def _run_ref(text: str) -> int | Literal["last"]:
    """A run id, or `last`: what `show` and `report` take, as the history module takes it."""
    if text == "last":
        return "last"
    # ASCII digits only: `str.isdigit` also takes `²`, which `int` refuses.
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"expected a run id or 'last', got {text!r}")
    return int(text)


def parser() -> argparse.ArgumentParser:
    # Unset unless given (SUPPRESS), so `history --db X list` keeps X from the outer parser.
    common = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    common.add_argument(
        "--db",
        type=Path,
        help="the history database (default: the ini file's llm_history under pytest's "
        f"rootdir, else {history.DEFAULT_PATH} there)",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    top = argparse.ArgumentParser(
        prog="llmtool", description="pytest-llmtool's run history and gap reports"
    )
    top.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = top.add_subparsers(dest="command", required=True)
    hist = commands.add_parser(
        "history", parents=[common], help="runs recorded by --llm-history (alone: list them)"
    )
    hist.set_defaults(handler=_list)
    actions = hist.add_subparsers(dest="action")
    actions.add_parser("list", parents=[common], help="every run").set_defaults(handler=_list)
    trend = actions.add_parser(
        "trend", parents=[common], help="pass rate with its 95%% interval, per run"
    )
    trend.add_argument("--model", help="only this model")
    trend.add_argument("--category", help="only this category")
    trend.add_argument("--task", help="only this task (its id, or node id without trial)")
    trend.add_argument(
        "--by",
        choices=["model", "category", "task"],
        default="model",
        help="one row per run and model, or per run, model and category or task",
    )
    trend.set_defaults(handler=_trend)
    show = actions.add_parser("show", parents=[common], help="one run and its items")
    show.add_argument("run", type=_run_ref, metavar="RUN_ID", help="a run id, or 'last'")
    show.set_defaults(handler=_show)
    report = actions.add_parser(
        "report", parents=[common], help="one run's report.json, as the history keeps it"
    )
    report.add_argument("run", type=_run_ref, metavar="RUN_ID", help="a run id, or 'last'")
    report.set_defaults(handler=_report)
    gaps = commands.add_parser(
        "gaps",
        help="the gap report of recorded runs, replayed on the current bashkit sandbox",
    )
    gaps.add_argument(
        "reports",
        nargs="+",
        type=Path,
        metavar="REPORT",
        help="report.json files, --llm-report directories, or bashkit-eval result files",
    )
    gaps.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="write gaps.json and gaps.md here"
    )
    gaps.add_argument(
        "--dataset",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="where the recorded tasks are (a dataset file or a directory; repeatable); "
        "default: the node id's path relative to the current directory, then to the "
        "report's directory and its parents",
    )
    gaps.add_argument("--no-replay", action="store_true", help="classify the recorded calls only")
    gaps.add_argument(
        "--top", type=int, default=10, metavar="N", help="rows printed per table (default 10)"
    )
    gaps.add_argument("--json", action="store_true", help="print gaps.json instead of tables")
    gaps.set_defaults(handler=_gaps)
    judge = commands.add_parser("judge", help="check the LLM judge (docs/judge.md)")
    judge_actions = judge.add_subparsers(dest="action", required=True)
    cal = judge_actions.add_parser(
        "calibrate",
        help="judge a labels file and compare with the people's scores and verdicts, or an "
        "ax-eval calibration suite and check each case's band",
    )
    cal.add_argument(
        "labels",
        type=Path,
        metavar="FILE",
        help="a .jsonl or .yaml labels file, or an ax-eval calibration suite (.yaml)",
    )
    cal.add_argument(
        "--judge-model", required=True, metavar="NAMES", help="a judge model, or a comma list"
    )
    cal.add_argument(
        "--samples", type=_positive, default=1, metavar="K", help="ask each judge K times"
    )
    cal.add_argument(
        "--min-agreement",
        metavar="METRIC=VALUE",
        help="exit 9 below it: agreement, kappa, alpha (a bare number: agreement); labels only",
    )
    cal.add_argument("--max-cost", type=float, metavar="USD", help="stop judging past this spend")
    cal.add_argument(
        "--no-order-check",
        action="store_true",
        help="skip judging each label again with the criteria reversed (half the calls); a "
        "suite is judged in one order only",
    )
    cal.add_argument("--json", action="store_true", help="print JSON instead of a table")
    cal.set_defaults(handler=_calibrate)
    return top


def _version() -> str:
    import pytest_llmtool

    return str(pytest_llmtool.__version__)


def _default_db() -> Path:
    """The database the plugin writes from here: the ini's `llm_history` (or the default)
    relative to the rootdir pytest finds."""
    from pytest_llmtool.run.compat import ini_value

    rootdir, value = ini_value(Path.cwd(), "llm_history")
    return rootdir / (value.strip() if value and value.strip() else history.DEFAULT_PATH)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "history":
        args.db = getattr(args, "db", None) or _default_db()
    args.json = getattr(args, "json", False)
    try:
        data, lines, *status = args.handler(args)
        print(json.dumps(data, indent=2) if args.json else "\n".join(lines))
        sys.stdout.flush()
    except (history.HistoryError, ReplayError, CommandError) as exc:
        print(f"llmtool: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader (`| head`) has gone: stop quietly, as `cat` does. Point stdout at
        # devnull so the interpreter's own flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return int(status[0]) if status else 0


if __name__ == "__main__":
    sys.exit(main())
