"""Small exact statistics for evals, with no scipy: the Wilson score interval of a rate, Fisher's exact test on two
rates, Newcombe's interval for their difference, and the spread of per-prompt rates.

A handful of runs per prompt proves little on its own: these say how little. The formulas follow Newcombe (1998),
"Interval estimation for the difference between independent proportions" (method 10), and scipy.stats.fisher_exact.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

Z95 = 1.959964  # the standard normal quantile of a two-sided 95% interval
ALPHA = 0.05  # a p-value below this (and an interval clear of 0) is read as evidence of a difference
SAME_TABLE_TOLERANCE = Fraction(1 + 10**7, 10**7)  # scipy's 1 + 1e-7: tables as likely as the observed one count


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def as_list(self) -> list[float]:
        return [self.low, self.high]


def wilson(successes: int, trials: int, z: float = Z95) -> Interval | None:
    """The Wilson score interval of `successes` out of `trials` (None with no trials: no rate to bound)."""
    if trials <= 0:
        return None
    if not 0 <= successes <= trials:
        raise ValueError(f"{successes} successes out of {trials} trials")
    p = successes / trials
    centre = p + z * z / (2 * trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    scale = 1 + z * z / trials
    # the exact ends of 0 and 1 are kept exact: rounding must not put a 0% rate's interval above 0
    low = 0.0 if successes == 0 else (centre - half) / scale
    high = 1.0 if successes == trials else (centre + half) / scale
    return Interval(low, high)


def wilson_list(successes: int, trials: int) -> list[float] | None:
    """The Wilson interval as stored in a summary: [low, high], or None."""
    interval = wilson(successes, trials)
    return None if interval is None else interval.as_list()


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p-value of Fisher's exact test on the table [[a, b], [c, d]], as scipy.stats.fisher_exact gives it:
    the probability, margins fixed, of every table no more likely than the observed one."""
    if min(a, b, c, d) < 0:
        raise ValueError("a 2x2 table holds counts, never negative")
    row, column, total = a + b, a + c, a + b + c + d
    if total == 0 or row in (0, total) or column in (0, total):
        return 1.0  # a margin of zero: every table is the observed one

    def weight(x: int) -> int:  # the hypergeometric probability of x, times comb(total, row)
        return math.comb(column, x) * math.comb(total - column, row - x)

    observed = weight(a) * SAME_TABLE_TOLERANCE
    tail = sum(w for w in map(weight, range(max(0, row + column - total), min(row, column) + 1)) if w <= observed)
    return min(1.0, float(Fraction(tail, math.comb(total, row))))


def newcombe(successes1: int, trials1: int, successes2: int, trials2: int, z: float = Z95) -> Interval | None:
    """Newcombe's hybrid score interval for p1 - p2, made of the two rates' Wilson intervals."""
    first, second = wilson(successes1, trials1, z), wilson(successes2, trials2, z)
    if first is None or second is None:
        return None
    p1, p2 = successes1 / trials1, successes2 / trials2
    below = math.sqrt((p1 - first.low) ** 2 + (second.high - p2) ** 2)
    above = math.sqrt((first.high - p1) ** 2 + (p2 - second.low) ** 2)
    return Interval(max(-1.0, p1 - p2 - below), min(1.0, p1 - p2 + above))


@dataclass(frozen=True)
class Difference:
    """Two rates compared: the second minus the first, its 95% interval and the exact test's p-value."""

    first: float
    second: float
    difference: float
    interval: Interval
    p_value: float

    @property
    def evidence(self) -> bool:
        """A difference is claimed only when both agree: the interval clears 0 and p < ALPHA."""
        return not self.interval.contains(0.0) and self.p_value < ALPHA

    def as_dict(self) -> dict:
        return {"first": self.first, "second": self.second, "difference": self.difference,
                "interval": self.interval.as_list(), "p_value": self.p_value, "evidence": self.evidence}


def difference(successes1: int, trials1: int, successes2: int, trials2: int) -> Difference | None:
    """The second rate against the first (None when either has no trials)."""
    interval = newcombe(successes2, trials2, successes1, trials1)
    if interval is None:
        return None
    p_value = fisher_exact(successes2, trials2 - successes2, successes1, trials1 - successes1)
    first, second = successes1 / trials1, successes2 / trials2
    return Difference(first, second, second - first, interval, p_value)


def spread(rates: Sequence[float]) -> dict[str, float | int | None]:
    """How far apart the per-prompt rates are: min, max and the sample standard deviation (None below two)."""
    values = list(rates)
    return {"prompts": len(values), "min": min(values) if values else None, "max": max(values) if values else None,
            "sd": statistics.stdev(values) if len(values) >= 2 else None}
