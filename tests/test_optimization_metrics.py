"""FC-Eval's optimization metrics against values computed by hand (arithmetic in comments)."""

from __future__ import annotations

import math

import pytest

from pytest_llmtool.kinds.optimization import metrics
from pytest_llmtool.records import AgentTaskMetrics, PytestSummary, SnapshotSummary

# Medians: nop, oracle, agent -> oracle/nop, agent/nop
#   m1.A.time_f(1): 2, 1, 0.5   -> 2, 4   (nop rounds 2, 1, 9: the median is 2)
#   m1.A.time_f(2): 3, 3, 1.5   -> 1, 2
#   m1.A.time_g:    1, 0.5, 1   -> 2, 1
#   m1.time_h:      4, 2, 4     -> 2, 1
#   m2.time_k:      1, 1, 0.25  -> 1, 4
NOP = {
    "m1.A.time_f(1)": [2.0, 1.0, 9.0],
    "m1.A.time_f(2)": [3.0],
    "m1.A.time_g": [1.0],
    "m1.time_h": [4.0],
    "m2.time_k": [1.0],
}
ORACLE = {
    "m1.A.time_f(1)": [1.0],
    "m1.A.time_f(2)": [3.0],
    "m1.A.time_g": [0.5],
    "m1.time_h": [2.0],
    "m2.time_k": [1.0],
}
AGENT = {
    "m1.A.time_f(1)": [0.5],
    "m1.A.time_f(2)": [1.5],
    "m1.A.time_g": [1.0],
    "m1.time_h": [4.0],
    "m2.time_k": [0.25],
}
PASSED = PytestSummary(passed=10)
SNAPSHOT_OK = SnapshotSummary(status="passed")


def test_split_name_follows_fceval_rule() -> None:
    split = metrics.split_name
    assert split("time_x") == metrics.NameParts("", "", "time_x")  # no module
    assert split("mod.time_x") == metrics.NameParts("mod", "", "time_x")
    assert split("pkg.mod.Suite.time_x") == metrics.NameParts("pkg.mod", "Suite", "time_x")
    # parameters are dropped, dots inside them included
    assert split("mod.Suite.time_x(10, 'a.b')") == metrics.NameParts("mod", "Suite", "time_x")
    assert split("time_x(1)") == metrics.NameParts("", "", "time_x")
    # nested classes: only the second-to-last part is a class, the outer one joins the module
    assert split("pkg.mod.Outer.Inner.time_x") == metrics.NameParts(
        "pkg.mod.Outer", "Inner", "time_x"
    )
    # two parts never have a class, capitalised or not; lower-case second-to-last: no class
    assert split("Suite.time_x") == metrics.NameParts("Suite", "", "time_x")
    assert split("pkg.mod.helpers.time_x") == metrics.NameParts("pkg.mod.helpers", "", "time_x")


def test_median_and_ratios() -> None:
    assert metrics.median([3.0, 1.0, 2.0]) == 2.0
    assert metrics.median([1.0, 2.0]) == 1.5  # (1 + 2) / 2
    assert metrics.median([]) is None
    assert metrics.median([0.0]) is None
    assert metrics.median([1.0, math.nan]) is None
    assert metrics.median([1.0, math.inf]) is None
    assert metrics.ratio(2.0, 0.5) == 4.0
    assert metrics.ratio(None, 1.0) is None
    assert metrics.gmean([4.0, 2.0, 1.0, 1.0, 4.0]) == pytest.approx(2.0)  # 32^(1/5)


def test_benchmark_speedup() -> None:
    b = metrics.benchmark_speedup("m1.A.time_f(1)", [2.0, 1.0, 9.0], [1.0], [0.5])
    assert (b.nop_median, b.oracle_median, b.agent_median) == (2.0, 1.0, 0.5)
    assert (b.agent_nop, b.oracle_nop, b.advantage) == (4.0, 2.0, 2.0)  # 2/0.5, 2/1, 4 - 2
    assert b.valid
    assert b.agent_nop_ci is None  # one agent round: no spread


def test_task_metrics_every_level() -> None:
    m = metrics.agent_task_metrics(NOP, ORACLE, AGENT, PASSED, SNAPSHOT_OK)
    assert m.success and not m.fallback_to_baseline
    assert not m.pytest_failed and not m.snapshot_failed
    assert (m.num_benchmarks, m.num_valid_benchmarks) == (5, 5)
    # gmean(4, 2, 1, 1, 4) = 32^(1/5) = 2
    assert m.task_speedup == pytest.approx(2.0)
    # L4, one group: gmean(agent) 2 - gmean(2, 1, 2, 2, 1) = 8^(1/5) = 1.515717 -> 0.484283
    assert m.agent_advantage_level4 == pytest.approx(0.484283, abs=1e-6)
    assert m.agent_advantage == m.agent_advantage_level4
    # L3: (m1,A,time_f) sqrt(8) - sqrt(2) = 1.414214; time_g 1 - 2 = -1; time_h 1 - 2 = -1;
    # time_k 4 - 1 = 3 -> (1.414214 - 1 - 1 + 3) / 4 = 0.603553
    assert m.agent_advantage_level3 == pytest.approx(0.603553, abs=1e-6)
    # L2: (m1,A) 8^(1/3) - 4^(1/3) = 2 - 1.587401 = 0.412599; (m1,) -1; (m2,) 3
    # -> (0.412599 - 1 + 3) / 3 = 0.804200
    assert m.agent_advantage_level2 == pytest.approx(0.804200, abs=1e-6)
    # L1: m1 gmean(4,2,1,1) - gmean(2,1,2,2) = 8^(1/4) - 8^(1/4) = 0; m2 3 -> 1.5
    assert m.agent_advantage_level1 == pytest.approx(1.5)


def test_failed_agent_falls_back_to_baseline() -> None:
    m = metrics.agent_task_metrics(
        NOP, ORACLE, AGENT, PytestSummary(passed=9, failed=1), SNAPSHOT_OK, task_cost_usd=0.3
    )
    assert m.pytest_failed and not m.success and m.fallback_to_baseline
    assert all(b.agent_nop == 1.0 for b in m.per_benchmark_speedups)
    f1 = m.per_benchmark_speedups[0]
    assert f1.name == "m1.A.time_f(1)"
    assert (f1.oracle_nop, f1.advantage) == (2.0, -1.0)  # unchanged; 1 - 2
    assert f1.agent_median == 0.5  # what was measured stays on record
    assert m.task_speedup == 1.0
    assert m.task_speedup_ci is None
    # L4: 1 - 8^(1/5) = 1 - 1.515717 = -0.515717
    assert m.agent_advantage == pytest.approx(-0.515717, abs=1e-6)
    # L3: (1 - sqrt 2) + (1 - 2) + (1 - 2) + (1 - 1) = -2.414214, / 4 = -0.603553
    assert m.agent_advantage_level3 == pytest.approx(-0.603553, abs=1e-6)
    # L2: (1 - 4^(1/3)) + (1 - 2) + (1 - 1) = -1.587401, / 3 = -0.529134
    assert m.agent_advantage_level2 == pytest.approx(-0.529134, abs=1e-6)
    # L1: m1 1 - 8^(1/4) = -0.681793; m2 0 -> -0.340896
    assert m.agent_advantage_level1 == pytest.approx(-0.340896, abs=1e-6)
    assert m.task_cost_usd == 0.3


def test_snapshot_failure_also_falls_back() -> None:
    broken = SnapshotSummary(status="passed", pass_to_fail=1)
    m = metrics.agent_task_metrics(NOP, ORACLE, AGENT, PASSED, broken)
    assert m.snapshot_failed and not m.pytest_failed and m.fallback_to_baseline
    assert m.task_speedup == 1.0


def test_a_failed_nop_never_falls_back() -> None:
    m = metrics.agent_task_metrics(NOP, ORACLE, NOP, PytestSummary(errors=1), is_nop=True)
    assert not m.success and not m.fallback_to_baseline
    assert m.task_speedup == 1.0  # its own times: every ratio is 1


def test_failure_conditions() -> None:
    assert metrics.pytest_failed(PytestSummary(passed=3, errors=1))  # 0 + 1 > 0
    assert not metrics.pytest_failed(PytestSummary(passed=3, skipped=2))
    # multi-agent merge: only failures beyond the oracle's count
    two = PytestSummary(failed=2)
    assert not metrics.pytest_failed(two, oracle=PytestSummary(failed=1, errors=1))  # 2 > 2 no
    assert metrics.pytest_failed(PytestSummary(failed=2, errors=1), oracle=two)  # 3 > 2
    assert metrics.pytest_failed(two)  # no oracle: 2 > 0
    assert metrics.snapshot_failed(SnapshotSummary(status="failed"))
    assert metrics.snapshot_failed(SnapshotSummary(status="passed", pass_to_fail=2))
    assert not metrics.snapshot_failed(SnapshotSummary(status="passed"))
    assert not metrics.snapshot_failed(None)


def test_merge_failure_comparison_decides_the_fallback() -> None:
    same = PytestSummary(passed=8, failed=2)
    kept = metrics.agent_task_metrics(NOP, ORACLE, AGENT, same, oracle_pytest=same)
    assert kept.success and kept.task_speedup == pytest.approx(2.0)
    worse = PytestSummary(passed=7, failed=3)
    reverted = metrics.agent_task_metrics(NOP, ORACLE, AGENT, worse, oracle_pytest=same)
    assert reverted.fallback_to_baseline and reverted.task_speedup == 1.0


def test_invalid_benchmarks_are_counted_but_left_out() -> None:
    nop = {**NOP, "m3.time_crash": [1.0], "m3.time_zero": [1.0]}
    oracle = {**ORACLE, "m3.time_crash": [1.0], "m3.time_zero": [0.0]}
    agent = {**AGENT, "m3.time_zero": [1.0]}  # time_crash: the agent's run has no time
    m = metrics.agent_task_metrics(nop, oracle, agent, PASSED)
    assert (m.num_benchmarks, m.num_valid_benchmarks) == (7, 5)
    crash = next(b for b in m.per_benchmark_speedups if b.name == "m3.time_crash")
    assert not crash.valid and crash.agent_nop is None and crash.oracle_nop == 1.0
    zero = next(b for b in m.per_benchmark_speedups if b.name == "m3.time_zero")
    assert not zero.valid and zero.oracle_median is None and zero.advantage is None
    assert m.task_speedup == pytest.approx(2.0)  # the five valid ones, as above
    assert m.agent_advantage_level1 == pytest.approx(1.5)
    # on fallback the agent counts as the baseline: time_crash becomes valid (1.0, 1.0)
    failed = metrics.agent_task_metrics(nop, oracle, agent, PytestSummary(failed=1))
    assert failed.num_valid_benchmarks == 6
    # L4: 1 - (8 · 1)^(1/6) = 1 - 2^(1/2) = -0.414214
    assert failed.agent_advantage == pytest.approx(-0.414214, abs=1e-6)


def test_no_valid_benchmark_gives_no_speedup() -> None:
    m = metrics.agent_task_metrics({"a.time_x": [1.0]}, {}, {"a.time_x": [1.0]}, PASSED)
    assert (m.num_benchmarks, m.num_valid_benchmarks) == (1, 0)
    assert m.task_speedup is None and m.agent_advantage is None and m.task_speedup_ci is None
    assert metrics.level_advantage([], 1) is None
    with pytest.raises(ValueError, match="levels are 1 to 4"):
        metrics.level_advantage([], 5)


def test_nested_classes_group_by_the_rule() -> None:
    speedups = [
        ("pkg.mod.Outer.Inner.time_x", 4.0, 1.0),  # module pkg.mod.Outer, class Inner
        ("pkg.mod.Outer.time_y", 1.0, 1.0),  # module pkg.mod, class Outer
    ]
    # L1: two modules, (4 - 1) and (1 - 1) -> 1.5; L4: gmean(4, 1) 2 - 1 = 1
    assert metrics.level_advantage(speedups, 1) == pytest.approx(1.5)
    assert metrics.level_advantage(speedups, 4) == pytest.approx(1.0)
    # parametrised variants of one function share its L3 group and split at no level
    params = [("m.C.time_z(1)", 4.0, 1.0), ("m.C.time_z(2)", 1.0, 1.0)]
    assert metrics.level_advantage(params, 3) == pytest.approx(1.0)  # gmean(4, 1) - 1


def test_paired_log_ratio_interval() -> None:
    # log ratios ln2 · (1, 2, 3): mean 2 ln2 (estimate 4), sd ln2, se = ln2/sqrt(3) = 0.400189
    # half = t(2) 4.302653 · 0.400189 = 1.721872; exp(1.386294 ∓ 1.721872) = 0.714924, 22.38
    ci = metrics.speedup_interval([2.0, 4.0, 8.0], [1.0, 1.0, 1.0])
    assert ci is not None and ci.method == "paired-log-t" and ci.n == 3
    assert ci.estimate == pytest.approx(4.0)
    assert ci.low == pytest.approx(0.714924, abs=1e-6)
    assert ci.high == pytest.approx(22.379993, abs=1e-5)
    assert metrics.speedup_interval([1.0], [1.0]) is None


def test_welch_interval_when_round_counts_differ() -> None:
    # var(ln nop) = ln2² over 3 rounds -> v1 = 0.160151; agent [1, 1]: v2 = 0
    # df = v1² / (v1² / 2) = 2; same mean and se as the paired case -> the same interval
    ci = metrics.speedup_interval([2.0, 4.0, 8.0], [1.0, 1.0])
    assert ci is not None and ci.method == "welch-log-t" and ci.n == 2
    assert ci.low == pytest.approx(0.714924, abs=1e-6)
    assert ci.high == pytest.approx(22.379993, abs=1e-5)


def test_task_speedup_interval_combines_log_ratios() -> None:
    # benchmark 1: mean 2 ln2, se 0.400189; benchmark 2: ratio 1 every round, se 0
    # mean ln2 (estimate 2), se = sqrt(0.400189²) / 2 = 0.200094, df 2
    # half = 4.302653 · 0.200094 = 0.860936; exp(0.693147 ∓ 0.860936) = 0.845532, 4.730750
    rounds = [([2.0, 4.0, 8.0], [1.0, 1.0, 1.0]), ([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])]
    ci = metrics.task_speedup_interval(rounds)
    assert ci is not None and ci.method == "combined-log-t"
    assert ci.estimate == pytest.approx(2.0)
    assert ci.low == pytest.approx(0.845532, abs=1e-6)
    assert ci.high == pytest.approx(4.730750, abs=1e-6)
    assert metrics.task_speedup_interval([([1.0], [1.0])]) is None
    task = metrics.agent_task_metrics(
        {"a.time_x": [2.0, 4.0, 8.0], "a.time_y": [1.0, 1.0, 1.0]},
        {"a.time_x": [1.0], "a.time_y": [1.0]},
        {"a.time_x": [1.0, 1.0, 1.0], "a.time_y": [1.0, 1.0, 1.0]},
        PASSED,
    )
    assert task.task_speedup_ci == ci
    assert task.task_speedup == pytest.approx(2.0)  # gmean(4 / 1, 1 / 1)


def test_fceval_ks_have_no_1() -> None:
    assert metrics.fceval_ks([1, 1]) == []
    assert metrics.fceval_ks([3, 3]) == [2]
    assert metrics.fceval_ks([4, 10]) == [2, 4, 5, 10]  # powers up to the fewest, 4
    assert metrics.fceval_ks([8, 8]) == [2, 4, 5, 8]
    assert metrics.fceval_ks([]) == []


def _payload(
    success: bool,
    speedup: float | None,
    advantage: float | None,
    benchmarks: tuple[int, int],
    cost: float,
    steps: int,
) -> AgentTaskMetrics:
    return AgentTaskMetrics(
        per_benchmark_speedups=[],
        pytest_summary=PASSED,
        pytest_failed=not success,
        snapshot_failed=False,
        success=success,
        fallback_to_baseline=not success,
        agent_advantage=advantage,
        agent_advantage_level1=None if advantage is None else advantage + 1,
        agent_advantage_level2=advantage,
        agent_advantage_level3=advantage,
        agent_advantage_level4=advantage,
        num_benchmarks=benchmarks[0],
        num_valid_benchmarks=benchmarks[1],
        task_speedup=speedup,
        task_cost_usd=cost,
        trajectory_length=steps,
    )


def test_run_summary() -> None:
    a1 = _payload(True, 2.0, 0.5, (5, 4), 0.2, 10)
    a2 = _payload(False, 1.0, -0.5, (5, 5), 0.4, 20)
    a3 = _payload(True, None, None, (2, 0), 0.0, 30)  # no valid benchmark
    a4 = _payload(True, 4.0, 1.0, (2, 2), 0.2, 40)
    b_fail = _payload(False, 1.0, -1.0, (5, 5), 0.0, 1)
    b_pass = _payload(True, 3.0, 2.0, (2, 2), 0.0, 3)
    run = metrics.run_summary(
        {
            "t1": [{"a:m": a1, "b:m": b_fail}, {"a:m": a2, "b:m": b_fail}],
            "t2": [{"a:m": a3, "b:m": b_pass}, {"a:m": a4, "b:m": b_fail}],
        }
    )
    a = run.by_agent["a:m"]
    assert (a.tasks, a.attempts) == (2, 4)
    assert a.mean_speedup == pytest.approx(7 / 3)  # (2 + 1 + 4) / 3, the None skipped
    assert a.mean_success_rate == 0.75 == a.accuracy  # 3 of 4
    assert (a.num_benchmarks, a.num_valid_benchmarks) == (14, 11)  # 5+5+2+2, 4+5+0+2
    assert a.agent_advantage == pytest.approx(1 / 3)  # (0.5 - 0.5 + 1) / 3
    assert a.agent_advantage_level1 == pytest.approx(4 / 3)  # (1.5 + 0.5 + 2) / 3
    assert a.mean_cost_per_task == pytest.approx(0.2)  # 0.8 / 4
    assert a.cost_weighted_advantage == pytest.approx(5 / 3)  # (1/3) / 0.2
    assert a.mean_trajectory_length == 25.0  # (10 + 20 + 30 + 40) / 4
    assert a.total_cost == pytest.approx(0.8)
    # pass@2: t1 1 - C(1,2)/C(2,2) = 1, t2 1 -> 1
    assert a.pass_at_k == {2: 1.0}
    b = run.by_agent["b:m"]
    assert b.cost_weighted_advantage == 0.0  # the cost is 0
    assert b.pass_at_k == {2: 0.5}  # t1 0 of 2 -> 0; t2 1 of 2 -> 1; mean 0.5
    assert b.agent_advantage == pytest.approx(-0.25)  # (-1 - 1 + 2 - 1) / 4
    assert run.total_cost == pytest.approx(0.8)
    assert run.cost_by_agent_model == pytest.approx({"a:m": 0.8, "b:m": 0.0})


def test_run_summary_without_advantage_or_attempts() -> None:
    only = metrics.agent_run_summary({"t": [_payload(True, None, None, (1, 0), 1.0, 2)]})
    assert only.agent_advantage is None and only.cost_weighted_advantage is None
    assert only.mean_speedup is None and only.pass_at_k == {}
    with pytest.raises(ValueError, match="at least one task attempt"):
        metrics.agent_run_summary({"t": []})


def test_mean_speedup_interval_is_over_tasks() -> None:
    # one attempt per task: a t interval on the logs of 2.0, 2.2, 2.4 (mean .786019, sd
    # .091161, half 4.302653 · .091161 / sqrt 3 = .226454), exponentiated: the geometric mean
    # 2.1939 in [1.7492, 2.7517], never below 0 (the "26.62x [0.00, 76.45]").
    one = {f"t{i}": [_payload(True, s, 0.0, (1, 1), 0.0, 1)] for i, s in enumerate((2.0, 2.2, 2.4))}
    ci = metrics.agent_run_summary(one).mean_speedup_ci
    assert ci is not None and (ci.method, ci.n, ci.small) == ("log-t", 3, True)
    assert (ci.estimate, ci.low, ci.high) == pytest.approx((2.19392, 1.74920, 2.75172), abs=1e-4)
    # attempts combined per task first (None skipped): t1 sqrt(2 · 1) = 1.414214, t2 4;
    # logs .346574, 1.386294: half 12.706205 · .519860 = 6.605449, so [.0032, 1757]: wide,
    # and above 0
    a = [_payload(True, s, 0.0, (1, 1), 0.0, 1) for s in (2.0, 1.0, None, 4.0)]
    ci = metrics.agent_run_summary({"t1": a[:2], "t2": a[2:]}).mean_speedup_ci
    assert ci is not None and (ci.method, ci.n) == ("log-t", 2)
    assert ci.estimate == pytest.approx(math.sqrt(math.sqrt(2) * 4))
    assert 0 < ci.low < 0.01 and ci.high > 1000
    # one task: no interval rather than the point [2, 2]; no speedup at all: none either
    assert metrics.agent_run_summary({"t": a[:1]}).mean_speedup_ci is None
    assert metrics.agent_run_summary({"t": a[2:3]}).mean_speedup_ci is None
