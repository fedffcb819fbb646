"""Why items' runs ended, in words: the counts of `StopTally.stops` as one phrase, and the
one line the short summary gives when some task ended on a reply that was not the model's
whole answer."""

from __future__ import annotations

from collections.abc import Mapping

from pytest_llmtool.records import StopTally

# The stops a reader must hear of even in the short summary: the last reply is not the
# model's whole answer.
ALARMING_STOPS = ("max_tokens", "refusal", "content_filter", "context_window", "empty")


def stops_line(stops: Mapping[str, int], *, natural: bool = True) -> str:
    """`stops` as "3 max_tokens, 1 refusal", most first; without `natural`, leaving out the
    model's own ends of turn."""
    shown = [(n, k) for k, n in stops.items() if natural or k != "end_turn"]
    return ", ".join(f"{n} {k}" for n, k in sorted(shown, key=lambda p: (-p[0], p[1])))


def cut_lines(by_model: Mapping[str, StopTally], noun: str = "tasks") -> list[str]:
    """One line when some item's last reply was cut at max_tokens, refused, filtered, empty,
    or over the context window: such an item is not a natural stop."""
    said = []
    for model, s in by_model.items():
        alarming = {k: n for k, n in s.stops.items() if k in ALARMING_STOPS}
        if alarming:
            said.append(f"{model} {stops_line(alarming)}")
    if not said:
        return []
    return [f"{noun.capitalize()} that ended on an unfinished reply: {'; '.join(said)}."]
