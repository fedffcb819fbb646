"""The anytime-valid comparison of `--llm-early-stop=compare` (`stats/sequential.py`): its
closed form, its pairing, and, by simulation as tests/test_coverage.py does, that looking
after every pair keeps the chance of a wrong decision at most alpha while a re-tested McNemar
p does not.

Deterministic: fixed seeds. 2000 runs of up to 200 pairs per case put the Monte-Carlo
standard error of a rate near 0.05 at 0.5 points; the exact rate (a recursion over the
discordant pairs) is checked too, so the bound does not rest on the simulation alone."""

from __future__ import annotations

import math
import random

import pytest

from pytest_llmtool.stats import ALPHA
from pytest_llmtool.stats.sequential import (
    ModelComparisons,
    PairedSequential,
    against_baseline,
    e_value,
    log_e_value,
)

MAX_PAIRS = 200
RUNS = 2000
DISCORDANCE = (0.1, 0.3, 1.0)


def _mcnemar_exact(discordant: int, a_wins: int) -> float:
    """The exact (binomial) McNemar p, two-sided."""
    tail = min(a_wins, discordant - a_wins)
    below = sum(math.comb(discordant, k) for k in range(tail + 1))
    return min(1.0, 2 * below / 2.0**discordant)


# Whether each rule rejects after s wins of n discordant pairs, for every n up to the max.
E_REJECTS = [[e_value(n, s) >= 1 / ALPHA for s in range(n + 1)] for n in range(MAX_PAIRS + 1)]
NAIVE_REJECTS = [[_mcnemar_exact(n, s) < ALPHA for s in range(n + 1)] for n in range(MAX_PAIRS + 1)]


def _exact_rejection(discordance: float) -> float:
    """P(the e-process ever reaches 1/alpha in MAX_PAIRS pairs | H0), exactly: the chance
    of crossing within n discordant pairs (a recursion over the walks not yet stopped),
    averaged over the binomial number of discordant pairs."""
    alive = {0: 1.0}
    crossed = [0.0]
    for n in range(1, MAX_PAIRS + 1):
        step: dict[int, float] = {}
        for s, p in alive.items():
            for wins in (s, s + 1):
                step[wins] = step.get(wins, 0.0) + p / 2
        crossed.append(crossed[-1] + sum(p for s, p in step.items() if E_REJECTS[n][s]))
        alive = {s: p for s, p in step.items() if not E_REJECTS[n][s]}
    return sum(
        math.comb(MAX_PAIRS, n) * discordance**n * (1 - discordance) ** (MAX_PAIRS - n) * crossed[n]
        for n in range(MAX_PAIRS + 1)
    )


def _simulate(discordance: float, a_wins: float, seed: int) -> tuple[float, float, list[int]]:
    """RUNS comparisons of up to MAX_PAIRS pairs through the tracker, looked at after every
    pair: the share the e-process decided, the share a McNemar p re-tested after every pair
    rejected, and the pair at which each decided run stopped."""
    rng = random.Random(seed)
    decided = naive = 0
    stopped: list[int] = []
    for _ in range(RUNS):
        tracker = PairedSequential("a", "b")
        naive_rejected = False
        discordant = wins = 0
        for trial in range(MAX_PAIRS):
            if rng.random() < discordance:
                a_passed = rng.random() < a_wins
                b_passed = not a_passed
                discordant, wins = discordant + 1, wins + a_passed
                naive_rejected = naive_rejected or NAIVE_REJECTS[discordant][wins]
            else:
                a_passed = b_passed = rng.random() < 0.5
            if not tracker.decided:
                tracker.observe("task", trial, "a", a_passed)
                tracker.observe("task", trial, "b", b_passed)
                if tracker.decided:
                    stopped.append(trial + 1)
        decided += tracker.decided
        naive += naive_rejected
    return decided / RUNS, naive / RUNS, stopped


@pytest.mark.parametrize("discordance", DISCORDANCE)
def test_looking_after_every_pair_keeps_the_error_under_alpha(discordance: float) -> None:
    """H0: each discordant pair is a fair coin. The e-process decides in at most alpha of the
    runs (exactly, and in the simulation within 3 standard errors of the exact rate), while
    McNemar's exact p re-tested after every pair, the rule the e-process replaces, rejects
    in well over alpha of the same runs."""
    exact = _exact_rejection(discordance)
    assert exact <= ALPHA
    simulated, naive, _ = _simulate(discordance, 0.5, seed=40)
    error = math.sqrt(exact * (1 - exact) / RUNS)
    assert abs(simulated - exact) <= 3 * error + 1 / RUNS, (simulated, exact)
    assert simulated <= ALPHA
    assert naive >= 2 * ALPHA, naive


@pytest.mark.parametrize("discordance", (0.3, 1.0))
def test_a_real_difference_is_decided_early(discordance: float) -> None:
    """H1: A wins 80% of the discordant pairs. Nearly every run decides, for A, and the
    typical run stops well before the maximum."""
    rate, _, stopped = _simulate(discordance, 0.8, seed=41)
    assert rate >= 0.95
    stopped.sort()
    assert stopped[len(stopped) // 2] <= MAX_PAIRS // 2


def test_the_closed_form_is_the_mixture_of_the_products() -> None:
    """E_n against the integral over p ~ Beta(1/2, 1/2) of prod (2p)^x (2(1-p))^(1-x),
    computed directly (p = sin^2 t makes the Beta(1/2, 1/2) density the uniform 2/pi dt)."""
    wins = [1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1]
    steps = 20000
    total = 0.0
    for i in range(steps):
        p = math.sin((i + 0.5) / steps * math.pi / 2) ** 2
        total += math.prod(2 * p if x else 2 * (1 - p) for x in wins)
    direct = total / steps
    assert e_value(len(wins), sum(wins)) == pytest.approx(direct, rel=1e-6)
    assert e_value(0, 0) == pytest.approx(1.0)
    # Two-sided: B's wins count as A's losses, symmetrically.
    assert e_value(9, 8) == pytest.approx(e_value(9, 1))


def test_it_is_a_martingale_under_no_difference() -> None:
    """E[E_(n+1) | E_n] = E_n when a discordant pair is a fair coin: what Ville's
    inequality needs."""
    for n in (0, 1, 5, 30, 150):
        for s in range(n + 1):
            after = (e_value(n + 1, s + 1) + e_value(n + 1, s)) / 2
            assert after == pytest.approx(e_value(n, s), rel=1e-9)
    with pytest.raises(ValueError):
        log_e_value(3, 4)


def _outcomes() -> list[tuple[str, int, str, bool | None]]:
    """Three tasks x two trials x two arms, short of a decision (5 of 6 discordant to A)."""
    table = {
        ("t1", 0): (True, False),
        ("t1", 1): (True, True),
        ("t2", 0): (True, False),
        ("t2", 1): (False, True),
        ("t3", 0): (True, False),
        ("t3", 1): (True, False),
    }
    return [
        (task, trial, arm, passed)
        for (task, trial), pair in table.items()
        for arm, passed in zip(("a", "b"), pair, strict=True)
    ]


def test_pairs_form_in_any_order() -> None:
    """Arms may arrive in any order and pairs complete in any order: the same counts and
    e-value whatever the order (the mixture depends on the counts only)."""
    outcomes = _outcomes()
    results = set()
    for seed in range(20):
        shuffled = outcomes[:]
        random.Random(seed).shuffle(shuffled)
        tracker = PairedSequential("a", "b")
        for outcome in shuffled:
            tracker.observe(*outcome)
        found = tracker.decision
        results.add((found.pairs, found.discordant, found.a_wins, round(found.e_value, 12)))
    assert results == {(6, 5, 4, round(e_value(5, 4), 12))}
    assert not tracker.decided and tracker.decision.better is None


def test_an_error_makes_no_pair() -> None:
    tracker = PairedSequential("a", "b")
    tracker.observe("t1", 0, "a", None)
    tracker.observe("t1", 0, "b", True)
    tracker.observe("t2", 0, "b", None)
    tracker.observe("t2", 0, "a", False)
    tracker.observe("t3", 0, "a", True)
    tracker.observe("t3", 0, "b", False)
    found = tracker.decision
    assert (found.pairs, found.discordant, found.a_wins) == (1, 1, 1)


def test_bad_outcomes_are_errors_not_counted() -> None:
    tracker = PairedSequential("a", "b")
    tracker.observe("t1", 0, "a", True)
    with pytest.raises(ValueError, match="already has an outcome"):
        tracker.observe("t1", 0, "a", True)
    with pytest.raises(ValueError, match="not an arm"):
        tracker.observe("t1", 0, "c", True)
    tracker.observe("t1", 0, "b", False)
    with pytest.raises(ValueError, match="already has an outcome"):
        tracker.observe("t1", 0, "b", False)
    assert tracker.decision.pairs == 1
    with pytest.raises(ValueError):
        PairedSequential("a", "a")


def _wins(tracker: PairedSequential | ModelComparisons, a: str, b: str, trials: range) -> None:
    for trial in trials:
        tracker.observe("task", trial, a, True)
        tracker.observe("task", trial, b, False)


def test_once_decided_it_stays_decided() -> None:
    """7 straight wins reach e = 26.8 >= 20; the losses that follow change nothing."""
    tracker = PairedSequential("a", "b")
    _wins(tracker, "a", "b", range(6))
    assert not tracker.decided
    _wins(tracker, "a", "b", range(6, 7))
    at_decision = tracker.decision
    assert at_decision.decided and at_decision.better == "a"
    assert (at_decision.pairs, at_decision.a_wins) == (7, 7)
    assert at_decision.e_value == pytest.approx(26.8125)
    assert at_decision.rule == (
        "mixture e-process on discordant pairs, Beta(1/2,1/2) prior, e >= 20 (alpha 0.05)"
    )
    _wins(tracker, "b", "a", range(7, 30))
    assert tracker.decision == at_decision


def test_b_better_is_decided_for_b() -> None:
    tracker = PairedSequential("a", "b")
    _wins(tracker, "b", "a", range(7))
    assert tracker.decision.better == "b"


def test_three_models_share_alpha_by_bonferroni() -> None:
    """Each of the two comparisons with the first model runs at alpha/2 (e >= 40): 7 wins
    (e = 26.8) decide a pair of models but not one of two comparisons; 8 (e = 50.3) do, and
    the run is decided once both comparisons are."""
    two = ModelComparisons(["m1", "m2"])
    _wins(two, "m2", "m1", range(7))
    assert two.decided

    three = ModelComparisons(["m1", "m2", "m3"])
    _wins(three, "m2", "m1", range(7))
    first = three.decisions[0]
    assert (first.b, first.alpha, first.decided) == ("m2", ALPHA / 2, False)
    assert first.rule.endswith("e >= 40 (alpha 0.05/2)")
    _wins(three, "m2", "m1", range(7, 8))
    assert three.decisions[0].decided and three.decisions[0].better == "m2"
    assert not three.decided
    # m1's outcomes are already in for trials 0..7: m3's complete those pairs.
    for trial in range(8):
        three.observe("task", trial, "m3", True)
    assert three.decided and three.decisions[1].better == "m3"
    with pytest.raises(ValueError, match="not one of"):
        three.observe("task", 0, "m4", True)


def test_a_baseline_is_the_other_arm_known_up_front() -> None:
    baseline = [("task", trial, False) for trial in range(10)] + [("other", 0, None)]
    tracker = against_baseline("run", baseline, name="main")
    for trial in range(6):
        tracker.observe("task", trial, "run", True)
    assert not tracker.decided
    tracker.observe("other", 0, "run", True)
    assert tracker.decision.pairs == 6
    tracker.observe("task", 6, "run", True)
    found = tracker.decision
    assert (found.subject, found.a, found.b, found.better) == ("baseline", "run", "main", "run")
