"""`--llm-early-stop=compare`: an anytime-valid comparison of two arms over paired trials, so
a run may stop as soon as it is decided. Pure: the run's early stop feeds it outcomes.

A pair is one (task, trial) both arms ran. Only discordant pairs (one arm passed, the other
failed) carry information about which arm is better; under H0 (no difference) each is won
by A with probability 1/2 whatever came before. The e-value is the mixture likelihood ratio
(a betting martingale / mixture SPRT) of s wins of n discordant pairs against that fair coin:

    E_n = integral over p ~ Beta(1/2, 1/2) of prod (2p)^x (2(1-p))^(1-x)
        = 2^n B(1/2 + s, 1/2 + n - s) / B(1/2, 1/2)

A nonnegative martingale under H0 starting at 1, so Ville's inequality bounds the chance it
EVER reaches 1/alpha by alpha, however often it is looked at and whenever the run stops: the
property a re-tested McNemar p lacks (tests/test_sequential.py shows both). The symmetric
prior makes it two-sided. Beta(1/2, 1/2) (Jeffreys; Krichevsky-Trofimov) rather than uniform:
its log-regret against the best single bet p is at most log(2) + log(n)/2 at every n, against
log(n + 1) for the uniform prior, so it reaches 1/alpha after fewer pairs under any alternative
(7 straight wins rather than 8 at alpha 0.05).

With m comparisons in one run (each model against the first), each uses alpha/m
(Bonferroni), so the chance any of them is decided wrongly stays at most alpha.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from pytest_llmtool.records import SequentialDecision
from pytest_llmtool.stats import ALPHA

# Beta(1/2, 1/2): the Jeffreys prior on the chance A wins a discordant pair.
PRIOR = 0.5


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def log_e_value(discordant: int, a_wins: int) -> float:
    """log E_n after `a_wins` of `discordant` pairs went to A (log space: 2^n overflows)."""
    if not 0 <= a_wins <= discordant:
        raise ValueError(f"{a_wins} wins out of {discordant} discordant pairs")
    return (
        discordant * math.log(2)
        + _log_beta(PRIOR + a_wins, PRIOR + discordant - a_wins)
        - _log_beta(PRIOR, PRIOR)
    )


def e_value(discordant: int, a_wins: int) -> float:
    """E_n: the evidence against "no difference"; >= 1/alpha decides."""
    return math.exp(log_e_value(discordant, a_wins))


def rule_text(alpha: float, comparisons: int = 1) -> str:
    """The rule as `SequentialDecision.rule` and the docs state it; `alpha` is the run's,
    shared by its `comparisons`."""
    level = f"alpha {alpha:g}" if comparisons == 1 else f"alpha {alpha:g}/{comparisons}"
    return (
        "mixture e-process on discordant pairs, Beta(1/2,1/2) prior, "
        f"e >= {comparisons / alpha:g} ({level})"
    )


def said(decision: SequentialDecision) -> str:
    """A decided comparison in words scoped to what it decides: which arm passes more of
    these tasks' trials, not a verdict over tasks (the paired comparison's, which may well
    find no detectable difference on the same run: docs/trials.md)."""
    d = decision
    a_ahead = d.better == d.a
    wins = d.a_wins if a_ahead else d.discordant - d.a_wins
    return (
        f"{d.better} ahead of {d.b if a_ahead else d.a} in these trials ({wins} of "
        f"{d.discordant} discordant pairs, e = {d.e_value:.3g} >= {1 / d.alpha:g})"
    )


class PairedSequential:
    """One comparison of arm `a` with arm `b`: outcomes arrive one arm at a time, in any
    order; a (task, trial) becomes a pair once both arms have it. Decided once the e-value
    reaches 1/alpha, and then frozen at that point: later outcomes change nothing."""

    def __init__(
        self, a: str, b: str, *, subject: str = "model", alpha: float = ALPHA, comparisons: int = 1
    ) -> None:
        if a == b:
            raise ValueError(f"an arm cannot be compared with itself: {a!r}")
        if comparisons < 1:
            raise ValueError(f"comparisons must be at least 1, got {comparisons}")
        self.a, self.b = a, b
        self.alpha = alpha / comparisons
        self._rule = rule_text(alpha, comparisons)
        self._subject = subject
        self._waiting: dict[tuple[str, int], dict[str, bool | None]] = {}
        self._pairs = self._discordant = self._a_wins = 0
        self._frozen: SequentialDecision | None = None

    def observe(self, task: str, trial: int, arm: str, passed: bool | None) -> None:
        """One arm's outcome of one trial; None (an error) makes no pair. The same arm's
        outcome of the same trial twice is an error: counting it twice would bias the test."""
        if arm not in (self.a, self.b):
            raise ValueError(f"{arm!r} is not an arm of {self.a!r} vs {self.b!r}")
        key = (task, trial)
        seen = self._waiting.setdefault(key, {})
        if arm in seen:
            raise ValueError(f"{arm!r} already has an outcome for {task} trial {trial}")
        seen[arm] = passed
        if len(seen) < 2 or self._frozen is not None:
            return
        # The key stays in `_waiting`, so an outcome repeated later is still caught.
        first, second = seen[self.a], seen[self.b]
        if first is None or second is None:
            return
        self._pairs += 1
        if first != second:
            self._discordant += 1
            self._a_wins += first
            if self._e_value() >= 1 / self.alpha:
                self._frozen = self._decision()

    def _e_value(self) -> float:
        return e_value(self._discordant, self._a_wins)

    def _decision(self) -> SequentialDecision:
        e = self._e_value()
        decided = e >= 1 / self.alpha
        better = None
        if decided:
            better = self.a if 2 * self._a_wins > self._discordant else self.b
        return SequentialDecision(
            subject=self._subject,
            a=self.a,
            b=self.b,
            alpha=self.alpha,
            pairs=self._pairs,
            discordant=self._discordant,
            a_wins=self._a_wins,
            e_value=e,
            decided=decided,
            better=better,
            rule=self._rule,
        )

    @property
    def decided(self) -> bool:
        return self._frozen is not None

    @property
    def decision(self) -> SequentialDecision:
        """The decision as it stands; once decided, as it was at the deciding pair."""
        return self._frozen if self._frozen is not None else self._decision()


def against_baseline(
    current: str,
    baseline: Iterable[tuple[str, int, bool | None]],
    *,
    name: str = "baseline",
    alpha: float = ALPHA,
    comparisons: int = 1,
) -> PairedSequential:
    """The run (arm a, `current`) against a saved report (arm b, `name`) whose (task, trial,
    passed) outcomes are all known up front: each trial of the run completes a pair.
    `comparisons` shares alpha with the run's other comparisons, as `ModelComparisons`."""
    tracker = PairedSequential(
        current, name, subject="baseline", alpha=alpha, comparisons=comparisons
    )
    for task, trial, passed in baseline:
        tracker.observe(task, trial, name, passed)
    return tracker


class ModelComparisons:
    """A run of several models: each model after the first against the first (m - 1
    comparisons at alpha/(m - 1) each); decided when every comparison is."""

    def __init__(self, models: Sequence[str], *, alpha: float = ALPHA) -> None:
        if len(models) < 2 or len(set(models)) != len(models):
            raise ValueError(f"a comparison needs two or more distinct models, got {models}")
        first, others = models[0], models[1:]
        self._trackers = {
            model: PairedSequential(first, model, alpha=alpha, comparisons=len(others))
            for model in others
        }
        self._first = first

    def observe(self, task: str, trial: int, model: str, passed: bool | None) -> None:
        if model == self._first:
            for tracker in self._trackers.values():
                tracker.observe(task, trial, model, passed)
        elif model in self._trackers:
            self._trackers[model].observe(task, trial, model, passed)
        else:
            raise ValueError(f"{model!r} is not one of the compared models")

    @property
    def decided(self) -> bool:
        return all(tracker.decided for tracker in self._trackers.values())

    @property
    def decisions(self) -> list[SequentialDecision]:
        return [tracker.decision for tracker in self._trackers.values()]
