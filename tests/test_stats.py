"""`pytest_llmtool.stats` against values computed by hand (the worked numbers are in comments)."""

from __future__ import annotations

import math

import pytest

from pytest_llmtool import stats


def test_wilson_40_of_50() -> None:
    # z² = 3.8415; centre = (0.8 + 0.038415) / 1.076829 = 0.778592;
    # half = 1.96 · sqrt(0.0032 + 0.000384146) / 1.076829 = 0.108968
    interval = stats.wilson(40, 50)
    assert interval is not None
    assert interval.estimate == 0.8
    assert interval.low == pytest.approx(0.669624, abs=1e-5)
    assert interval.high == pytest.approx(0.887560, abs=1e-5)
    assert interval.n == 50 and not interval.small


def test_wilson_at_the_edges_stays_inside_0_1() -> None:
    # k = 0, n = 10: centre = half = 0.192073 / 1.384146 = 0.138766
    none = stats.wilson(0, 10)
    assert none is not None
    assert (none.low, none.estimate) == (0.0, 0.0)
    assert none.high == pytest.approx(0.277533, abs=1e-5)
    every = stats.wilson(10, 10)
    assert every is not None
    assert every.high == 1.0 and every.low == pytest.approx(1 - 0.277533, abs=1e-5)
    assert every.small
    assert stats.wilson(0, 0) is None
    with pytest.raises(ValueError):
        stats.wilson(3, 2)


def test_mean_interval_uses_t_for_small_samples() -> None:
    # mean 0.75, sd 0.5, t(3) = 3.182446 -> half = 3.182446 · 0.5 / 2 = 0.795612
    interval = stats.mean_interval([1.0, 0.0, 1.0, 1.0])
    assert interval is not None
    assert interval.estimate == 0.75
    assert interval.low == pytest.approx(0.75 - 0.795612, abs=1e-6)
    assert interval.high == pytest.approx(0.75 + 0.795612, abs=1e-6)
    # one value has no spread to measure: no interval rather than a point
    assert stats.mean_interval([0.4]) is None
    assert stats.mean_interval([]) is None


def test_mean_interval_keeps_the_t_quantile_past_30() -> None:
    # The old table fell back to the normal 1.96 from 30 df on; t(39) is 2.022691.
    values = [0.0, 1.0] * 20  # n = 40, mean 0.5, sd = sqrt(10/39) = 0.506370
    interval = stats.mean_interval(values)
    assert interval is not None
    assert interval.high - 0.5 == pytest.approx(2.022691 * 0.506370 / math.sqrt(40), abs=1e-6)


@pytest.mark.parametrize(
    ("df", "quantile"),
    [(1, 12.706205), (4, 2.776445), (29, 2.045230), (30, 2.042272), (120, 1.979930)],
)
def test_t_quantiles_at_every_degree_of_freedom(df: int, quantile: float) -> None:
    assert stats.t95(df) == pytest.approx(quantile, abs=1e-6)
    assert stats.t_sf2(stats.t95(df), df) == pytest.approx(0.05, abs=1e-9)


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [  # Newcombe (1998), Table II, method 4 (score with continuity correction)
        (81, 263, 0.2535, 0.3682),
        (15, 148, 0.0598, 0.1644),
        (0, 20, 0.0, 0.2005),
        (1, 29, 0.0018, 0.1963),
        (29, 29, 0.8544, 1.0),
    ],
)
def test_wilson_with_continuity_correction(k: int, n: int, low: float, high: float) -> None:
    found = stats.wilson_cc(k, n, n)
    assert found is not None
    assert (found.low, found.high) == (pytest.approx(low, abs=1e-4), pytest.approx(high, abs=1e-4))


def test_wilson_with_continuity_correction_at_one_task_and_bad_counts() -> None:
    one = stats.wilson_cc(0, 1, 1)
    # (z² + 1 + z·sqrt(z² + 2 - 1)) / (2(1 + z²)) = (4.8415 + 4.3128) / 9.6829 = .94538
    assert one is not None and (one.low, one.estimate) == (0.0, 0.0)
    assert one.high == pytest.approx(0.94538, abs=1e-5)
    assert stats.wilson_cc(0, 0, 0) is None
    with pytest.raises(ValueError):
        stats.wilson_cc(3, 2, 2)


@pytest.mark.parametrize(
    ("n", "c", "k", "at_k", "hat_k"),
    [
        (5, 2, 1, 0.4, 0.4),  # pass@1 = pass^1 = c/n
        (5, 2, 2, 1 - 3 / 10, 1 / 10),  # 1 - C(3,2)/C(5,2); C(2,2)/C(5,2)
        (5, 0, 3, 0.0, 0.0),
        (3, 2, 2, 1.0, 1 / 3),  # n - c < k: some attempt of any 2 passes
        (10, 3, 5, 1 - 21 / 252, 0.0),  # C(7,5) = 21, C(10,5) = 252; C(3,5) = 0
        (4, 4, 4, 1.0, 1.0),
    ],
)
def test_pass_at_k_and_pass_hat_k(n: int, c: int, k: int, at_k: float, hat_k: float) -> None:
    assert stats.pass_at_k(n, c, k) == pytest.approx(at_k)
    assert stats.pass_hat_k(n, c, k) == pytest.approx(hat_k)


def test_pass_k_averages_over_tasks_and_leaves_out_short_ones() -> None:
    attempts = {
        "a": [True, False, False, True, False],  # n 5, c 2: @2 0.7, ^2 0.1
        "b": [True, True, True],  # @2 1.0, ^2 1.0
        "c": [False],  # fewer than 2 attempts: left out of k = 2
    }
    result = stats.pass_k(attempts, 2)
    assert result is not None
    assert result.pass_at_k == pytest.approx((0.7 + 1.0) / 2)
    assert result.pass_hat_k == pytest.approx((0.1 + 1.0) / 2)
    assert (result.tasks, result.left_out) == (2, 1)
    assert stats.pass_k({"c": [False]}, 2) is None
    assert stats.flaky(attempts) == ["a"]


@pytest.mark.parametrize(
    ("attempts", "ks"),
    [(1, [1]), (2, [1, 2]), (3, [1, 2]), (5, [1, 2, 4, 5]), (10, [1, 2, 4, 5, 8, 10])],
)
def test_reported_ks(attempts: int, ks: list[int]) -> None:
    assert stats.reported_ks(attempts) == ks


@pytest.mark.parametrize(
    ("a_only", "b_only", "n"),
    [(4, 0, 5), (5, 0, 5), (0, 5, 5), (4, 1, 5), (2, 1, 10), (10, 3, 50), (0, 0, 5), (0, 0, 1)],
)
def test_paired_binary_inverts_mcnemars_score_test(a_only: int, b_only: int, n: int) -> None:
    found = stats.paired_binary(a_only, b_only, n)
    assert found is not None and found.method == "tango"
    d = found.difference
    assert d.estimate == (a_only - b_only) / n
    assert -1.0 <= d.low <= d.estimate <= d.high <= 1.0 and d.low < d.high
    discordant = a_only + b_only
    z = (a_only - b_only) / math.sqrt(discordant) if discordant else 0.0
    assert found.p == pytest.approx(math.erfc(abs(z) / math.sqrt(2)))
    # the interval and the test agree: it excludes 0 exactly when p < 0.05
    assert (d.low > 0 or d.high < 0) == (found.p < 0.05)
    # at an inner bound Tango's statistic is exactly ±1.96
    for bound, sign in ((d.low, 1), (d.high, -1)):
        if -1 < bound < 1:
            statistic = stats._tango_statistic(a_only, b_only, n, bound)
            assert statistic == pytest.approx(sign * stats.Z95, abs=1e-6)


def test_paired_binary_is_symmetric_and_checks_its_counts() -> None:
    ahead, behind = stats.paired_binary(4, 1, 9), stats.paired_binary(1, 4, 9)
    assert ahead is not None and behind is not None
    assert ahead.difference.low == pytest.approx(-behind.difference.high)
    assert ahead.p == behind.p
    assert stats.paired_binary(0, 0, 0) is None
    with pytest.raises(ValueError):
        stats.paired_binary(3, 3, 5)


def test_paired_rates_over_shared_tasks() -> None:
    # pass/fail: McNemar's score test, Tango's interval (1 flip each way)
    current = {"a": 1.0, "b": 0.0, "c": 1.0, "new": 1.0}
    other = {"a": 1.0, "b": 1.0, "c": 0.0, "gone": 0.0}
    found = stats.paired_rates(current, other)
    assert found is not None
    assert (found.method, found.difference.n, found.p) == ("tango", 3, 1.0)
    # rates of several attempts: the paired t test and its interval, cut to [-1, 1]
    # differences .5, -.5, 1: mean 1/3, sd .763763, t(2) = 4.302653: 1/3 ± 1.897, which
    # would read -156 pp to +223 pp; a difference of rates lies in [-1, 1]
    found = stats.paired_rates({"a": 1.0, "b": 0.5, "c": 1.0}, {"a": 0.5, "b": 1.0, "c": 0.0})
    assert found is not None and found.method == "paired-t"
    assert (found.difference.low, found.difference.high) == (-1.0, 1.0)
    # t = (1/3) / (.763763 / sqrt 3) = .755929 on 2 df
    assert found.p == pytest.approx(0.528595, abs=1e-5)
    # no spread in the differences: the majority outcomes decide, never a zero-width t
    same = stats.paired_rates({"a": 0.5, "b": 1.0}, {"a": 0.5, "b": 1.0})
    assert same is not None and same.method == "tango" and same.difference.high > 0
    assert stats.paired_rates({"x": 1.0}, {"y": 1.0}) is None


def test_holm_steps_down() -> None:
    # sorted .01, .02, .04 -> 3·.01, 2·.02, max(.04, 1·.04)
    assert stats.holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert stats.holm([]) == []


def test_tasks_to_detect_a_paired_change() -> None:
    now = {str(i): 1.0 for i in range(5)}
    then = {"0": 0.0, "1": 0.0, "2": 1.0, "3": 1.0, "4": 1.0}
    found = stats.paired_rates(now, then)
    assert found is not None
    # psi = .4, d = .4: (1.96·.632456 + .841621·.489898)^2 / .16 = 17.1
    assert stats.tasks_to_detect(found, now, then) == 18
    flat = stats.paired_rates(now, now)
    assert flat is not None and stats.tasks_to_detect(flat, now, now) is None


def test_geometric_mean_interval_stays_positive() -> None:
    # logs of 1, 10, 100: mean ln 10, sd ln 10 -> [10 / e^(4.302653·ln10/sqrt3), ...]
    found = stats.log_mean_interval([1.0, 10.0, 100.0])
    assert found is not None
    assert found.estimate == pytest.approx(10.0)
    spread = math.exp(4.302653 * math.log(10) / math.sqrt(3))
    assert found.low == pytest.approx(10 / spread, rel=1e-5) and found.low > 0
    assert found.high == pytest.approx(10 * spread, rel=1e-5)
    assert stats.log_mean_interval([5.0]) is None
    assert stats.log_mean_interval([2.0, 2.0]) is None
    with pytest.raises(ValueError):
        stats.log_mean_interval([0.0, 1.0])
