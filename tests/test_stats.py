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
    one = stats.mean_interval([0.4])
    assert one == stats.Interval(0.4, 0.4, 0.4, 1)
    assert stats.mean_interval([]) is None


def test_mean_interval_uses_the_normal_quantile_from_30_on() -> None:
    values = [0.0, 1.0] * 20  # n = 40, mean 0.5, sd = sqrt(10/39) = 0.506370
    interval = stats.mean_interval(values)
    assert interval is not None
    assert interval.high - 0.5 == pytest.approx(1.959964 * 0.506370 / math.sqrt(40), abs=1e-6)


def test_clustered_interval_averages_each_task_first() -> None:
    # task means 1.0, 0.5, 0.0 -> the same as mean_interval of those three
    attempts = {"a": [1.0, 1.0, 1.0], "b": [1.0, 0.0], "c": [0.0, 0.0, 0.0, 0.0]}
    assert stats.clustered_mean_interval(attempts) == stats.mean_interval([1.0, 0.5, 0.0])


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
    ("a_only", "b_only", "p"),
    [
        (1, 6, 2 * (1 + 7) / 128),  # n 7: P[X <= 1] = 8/128
        (0, 5, 2 / 32),
        (3, 3, 1.0),  # 2 · 42/64 capped at 1
        (0, 0, 1.0),
        (2, 10, 2 * (1 + 12 + 66) / 4096),
    ],
)
def test_mcnemar_exact(a_only: int, b_only: int, p: float) -> None:
    assert stats.mcnemar(a_only, b_only) == pytest.approx(p)


def test_paired_difference_over_shared_tasks() -> None:
    current = {"a": 1.0, "b": 0.0, "c": 1.0, "new": 1.0}
    other = {"a": 1.0, "b": 1.0, "c": 0.0, "gone": 0.0}
    paired = stats.paired_difference(current, other)
    assert paired is not None
    assert paired.tasks == ["a", "b", "c"]
    # differences 0, -1, 1: mean 0, sd 1, t(2) = 4.302653 -> half 4.302653 / sqrt(3)
    assert paired.difference.estimate == 0.0
    assert paired.difference.high == pytest.approx(4.302653 / math.sqrt(3), abs=1e-6)
    assert stats.paired_difference({"x": 1.0}, {"y": 1.0}) is None


def test_detectable_change_is_about_2_8_standard_errors() -> None:
    interval = stats.mean_interval([0.0, 1.0] * 50)  # sd 0.502519, SE 0.0502519
    assert interval is not None
    detectable = stats.detectable_change(interval)
    assert detectable == pytest.approx(2.801585 * 0.0502519, abs=1e-6)
    assert stats.detectable_change(stats.Interval(1.0, 1.0, 1.0, 1)) is None
