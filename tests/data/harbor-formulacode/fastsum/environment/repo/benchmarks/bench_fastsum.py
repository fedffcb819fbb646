"""asv-style benchmarks: `time_*` functions and methods, timed by the verifier."""

from fastsum import mean, total

VALUES = list(range(200_000))


class TimeTotal:
    def time_small(self):
        total(50_000)

    def time_large(self):
        total(300_000)


def time_mean():
    mean(VALUES)
