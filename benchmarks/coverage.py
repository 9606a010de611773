#!/usr/bin/env python3
"""How often the intervals of repeated compares of one pair hold at other
times (benchmarks/drift.sh makes the records).

    benchmarks/coverage.py benchmarks/runs/drift-<stamp> [more records] [--drift D]

For each compare: its median ratio and the interval it reported. Then, for
the intervals as recorded ("windows only") and for the same intervals
widened by a between-measurement spread ("with drift"):

  - how often an interval covers the long-run ratio, estimated as the median
    of every compare's median (a 95% interval should, about 95% of the time);
  - how often it covers another compare's median (a 95% interval of the
    long-run ratio covers another measurement's median about 83% of the time
    when the spread between measurements dominates: their difference has
    twice the variance).

The spread is estimated leave-one-out (the sd of the log medians of the
other compares), so no interval is judged with its own median; --drift D
also shows a fixed value (the one harness.toml ships).
"""
import json
import math
import statistics
import sys
from pathlib import Path

Z95 = 1.959964


def widen(median, ci, drift, z=Z95):
    """ratchet's referee::stats::with_drift."""
    below, above = math.log(median / ci[0]), math.log(ci[1] / median)
    grow = lambda h: math.sqrt(h * h + (z * drift) ** 2)
    return [median / math.exp(grow(below)), median * math.exp(grow(above))]


def windows_only(c):
    """The windows' own interval: a record made with a drift is unwidened
    again (the order statistics it started from are its block ratios)."""
    ratios = sorted(c["block_ratios"])
    n = len(ratios)
    # The rank ratchet's order-statistic interval uses at 95%.
    k = max(i for i in range(1, n // 2 + 1) if 1 - 2 * binom_cdf(n, i - 1) >= 0.95)
    return [ratios[k - 1], ratios[n - k]]


def binom_cdf(n, k):
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def rates(intervals, medians, long_run):
    n = len(medians)
    grand = sum(lo <= long_run <= hi for lo, hi in intervals)
    others = sum(
        lo <= medians[j] <= hi
        for i, (lo, hi) in enumerate(intervals)
        for j in range(n)
        if j != i
    )
    return grand, n, others, n * (n - 1)


def main():
    args = sys.argv[1:]
    fixed = None
    if "--drift" in args:
        i = args.index("--drift")
        fixed = float(args[i + 1])
        del args[i : i + 2]
    files = [f for record in args for f in Path(record).glob("drift-*.json") if f.stat().st_size]
    rows = []
    for f in sorted(files, key=lambda f: f.with_suffix(".start").read_text()):
        c = json.loads(f.read_text())["comparisons"][0]
        start = (f.with_suffix(".start")).read_text().strip()
        rows.append((start, c["ratio_median"], windows_only(c), c["block_ratios"]))
    medians = [r[1] for r in rows]
    logs = [math.log(m) for m in medians]
    long_run = statistics.median(medians)
    print(f"{len(rows)} compares of one pair, {rows[0][0]} to {rows[-1][0]}")
    print(f"{'start':<22}{'median':>8}  {'windows only':<18}{'with drift (loo)':<20}")
    loo = []
    for i, (start, m, ci, _) in enumerate(rows):
        d = statistics.stdev(logs[:i] + logs[i + 1:])
        w = widen(m, ci, d)
        loo.append(w)
        print(f"{start:<22}{m:>8.4f}  [{ci[0]:.4f}, {ci[1]:.4f}]  [{w[0]:.4f}, {w[1]:.4f}]  drift {d:.4f}")
    print(f"\nlong-run ratio (median of medians) {long_run:.4f}; "
          f"sd of the log medians {statistics.stdev(logs):.4f}; "
          f"median sd of the log ratios within a compare "
          f"{statistics.median(statistics.stdev([math.log(x) for x in r[3]]) for r in rows):.4f}")
    sets = [("windows only", [r[2] for r in rows]), ("with drift, leave-one-out", loo)]
    if fixed is not None:
        sets.append((f"with drift {fixed}", [widen(r[1], r[2], fixed) for r in rows]))
    print(f"\n{'intervals':<28}{'cover the long-run ratio':>26}{'cover the others medians':>28}")
    for name, ivs in sets:
        g, n, o, m = rates(ivs, medians, long_run)
        print(f"{name:<28}{g:>14} of {n:<3} ({g / n:4.0%}){o:>16} of {m:<3} ({o / m:4.0%})")
    d = statistics.stdev(logs)
    need = ((Z95 + 0.8416) * d / 0.03) ** 2
    print(f"\nwhat it costs: every interval is at least +-{Z95 * d:.1%} wide whatever the windows;"
          f" a 3% change is told from none (95%, power 80%) by about {math.ceil(need)}"
          f" independent measurements minutes apart, not by more windows in one.")


if __name__ == "__main__":
    main()
