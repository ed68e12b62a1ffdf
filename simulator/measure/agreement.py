"""How well simulated step times predict measured ones.

Errors, the Spearman rank correlation (printed with its n; only from MIN_RANKED placements on, "n/a" with the
reason otherwise, never "nan"), and a pairwise concordance in which placements whose measured interquartile
ranges overlap count as ties. Used by `placeto eval` (placeto.cli.eval, placeto.harness.evaluate) and
experiments/benchmarks/sim_vs_hardware.py.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

import numpy as np

MIN_RANKED = 5  # placements needed before a rank correlation is reported (with fewer, one swap moves it by 0.3+)
ERROR_MEANING = "error = (simulated - measured) / measured median step time (+: the simulator predicts slower)"


class EvalRow(NamedTuple):
    """One placement: its simulated runtime and, if run, its measured step."""

    name: str
    simulated_us: float
    measured: Any = None  # simulator.hardware.timing.Timing, or None when not run on hardware


class Agreement(NamedTuple):
    """How well simulated runtimes predict measured ones.

    Over a set of placements.
    """

    median_ape: float  # median of |simulated - measured| / measured, in percent (NaN: nothing measured)
    mean_ape: float  # mean of the same, percent
    spearman: float  # Spearman rank correlation of simulated and measured (NaN: see spearman_note)
    n: int  # measured placements
    spearman_note: str = ""  # why there is no rank correlation ("" when there is one)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation of `x` and `y`, or NaN where undefined.

    scipy.stats.spearmanr when installed, else the same statistic with average ranks. NaN for fewer than MIN_RANKED
    points or when either side has all values equal (`spearman_note` says which).
    """
    if len(x) < MIN_RANKED:
        return math.nan
    if np.ptp(np.asarray(x, dtype=np.float64)) == 0 or np.ptp(np.asarray(y, dtype=np.float64)) == 0:
        return math.nan
    try:
        from scipy.stats import spearmanr
    except ImportError:  # scipy is a dev dependency: the same statistic with average ranks
        def ranks(v):
            v = np.asarray(v, dtype=np.float64)
            _, inv, counts = np.unique(v, return_inverse=True, return_counts=True)
            return (np.cumsum(counts) - (counts - 1) / 2.0)[inv]

        rx, ry = ranks(x), ranks(y)
        if rx.std() == 0 or ry.std() == 0:
            return math.nan
        return float(np.corrcoef(rx, ry)[0, 1])
    return float(spearmanr(x, y).statistic)


def agreement(rows: Sequence[EvalRow]) -> Agreement:
    """Errors and rank correlation of simulated against measured times.

    Over the measured rows, against their median step times.
    """
    pairs = [(r.simulated_us, r.measured.median_us) for r in rows if r.measured is not None]
    if not pairs:
        return Agreement(math.nan, math.nan, math.nan, 0, "nothing measured")
    sim, meas = np.asarray(pairs).T
    ape = np.abs(sim - meas) / meas * 100
    return Agreement(float(np.median(ape)), float(np.mean(ape)), spearman(sim, meas), len(pairs),
                     spearman_note(sim, meas))


def spearman_note(sim: Sequence[float], meas: Sequence[float]) -> str:
    """Why `spearman(sim, meas)` is undefined, or "" when it is not."""
    if len(sim) < MIN_RANKED:
        return f"n={len(sim)}: needs >= {MIN_RANKED} placements"
    if np.ptp(np.asarray(sim, dtype=np.float64)) == 0:
        return "every placement simulates to the same time"
    if np.ptp(np.asarray(meas, dtype=np.float64)) == 0:
        return "every placement measures the same time"
    return ""


class Concordance(NamedTuple):
    """Pairs of placements a prediction orders as measurement does.

    Pairs whose measured IQRs overlap count as ties (their measured order is noise).
    """

    agree: float  # untied pairs the prediction orders as measured (a predicted tie counts one half)
    disagree: float  # untied pairs it orders the other way (half for a predicted tie)
    ties: int  # pairs whose measured IQRs overlap: not counted
    pairs: int  # all pairs, n (n - 1) / 2

    @property
    def fraction(self) -> float:
        """agree / (agree + disagree); NaN when every pair is tied."""
        counted = self.agree + self.disagree
        return self.agree / counted if counted else math.nan


def concordance(predicted: Sequence[float], measured: Sequence[Any],
                also_tied: Sequence[Any] | None = None) -> Concordance:
    """How often `predicted` orders two placements as their measured medians do.

    Args:
      predicted: float[n] simulated times, or another run's medians.
      measured: simulator.hardware.timing.Timing[n]; a pair whose measured interquartile ranges overlap is a tie.
      also_tied: Timing[n] of a second run, if any: a pair whose IQRs overlap there too is also a tie.
    """
    n = len(predicted)
    agree = disagree = 0.0
    ties = 0
    for i in range(n):
        for j in range(i + 1, n):
            if any(_overlap(t[i], t[j]) for t in (measured, also_tied) if t is not None):
                ties += 1
                continue
            want = np.sign(measured[i].median_us - measured[j].median_us)
            got = np.sign(predicted[i] - predicted[j])
            agree += 1.0 if got == want else 0.5 if got == 0 else 0.0
            disagree += 0.0 if got == want else 0.5 if got == 0 else 1.0
    return Concordance(agree, disagree, ties, n * (n - 1) // 2)


def _overlap(a: Any, b: Any) -> bool:
    """Whether two Timings' interquartile ranges [q25, q75] overlap."""
    return a.q25_us <= b.q75_us and b.q25_us <= a.q75_us


def format_spearman(a: Agreement) -> str:
    """"Spearman 0.80 (n=7)", or "Spearman n/a (<reason>)" when undefined.

    Never "nan".
    """
    if a.spearman_note:
        return f"Spearman n/a ({a.spearman_note})"
    return f"Spearman {a.spearman:.2f} (n={a.n})"


def format_agreement(a: Agreement) -> str:
    """The summary line: errors, and Spearman with its n.

    Over the measured placements: the errors of the simulated against the measured median step times; the Spearman
    rank correlation is "n/a (reason)" when undefined, never "nan".
    """
    if a.n == 0:
        return "median |error| n/a, Spearman n/a (nothing measured)"
    return (f"median |error| {a.median_ape:.1f}%, mean |error| {a.mean_ape:.1f}% over {a.n} placement"
            f"{'' if a.n == 1 else 's'}; {format_spearman(a)}")


def short_name(name: str) -> str:
    """A placement's name as tables print it: the file name of a path.

    "runs/etf.json" -> "etf.json".
    """
    return name.replace("\\", "/").rsplit("/", 1)[-1]


def versus_single(rows: Sequence[EvalRow], single: EvalRow) -> list[str]:
    """Summary lines comparing the other measured placements with `single`.

    `single` is a measured single-device placement; speeds are single's median over theirs (2.00x = twice as fast).
    The lines give the fastest measured and, when any, those measured slower than the single device, with how many
    the simulator had predicted faster.
    """
    base = single.measured.median_us
    others = [r for r in rows if r is not single and r.measured is not None]
    if not others:
        return []
    lines = []
    best = min(others, key=lambda r: r.measured.median_us)
    if best.measured.median_us < base:
        lines.append(f"fastest measured: {short_name(best.name)}, {base / best.measured.median_us:.2f}x the speed of "
                     f"the single device ({short_name(single.name)})")
    slower = sorted((r for r in others if r.measured.median_us > base), key=lambda r: r.measured.median_us)
    if slower:
        speeds = ", ".join(f"{short_name(r.name)} {base / r.measured.median_us:.2f}x" for r in slower)
        predicted = sum(r.simulated_us < single.simulated_us for r in slower)
        tail = (f"; the simulator predicted {'it' if len(slower) == 1 else f'{predicted} of them'} faster than the "
                f"single device" if predicted else "")
        lines.append(f"measured SLOWER than the single device ({short_name(single.name)}, {base / 1e3:.3f} ms): "
                     f"{speeds} its speed{tail}")
    return lines
