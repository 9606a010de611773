#!/usr/bin/env python3
"""Summarizes a benchmarks/referee.sh output folder.

The keep rule is restated here, for resampling recorded A/A windows: a
candidate is kept when the median of its sample ratios is at most
1 - threshold and the exact order-statistic interval of the median at 97.5%
(referee/stats.rs, referee/judge.rs) lies below 1; an interval straddling
the threshold line is extended once with as many samples again.
"""
import glob
import records
import json
import math
import os
import random
import statistics as st
import sys

LEVEL = 0.975
THRESHOLD = 0.03


def binom_half_cdf(n, k):
    return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n


def interval(xs, level=LEVEL):
    n = len(xs)
    if n < 6 or 1 - 2 / 2 ** n < level:
        return None
    k = 1
    while k < n // 2 and 1 - 2 * binom_half_cdf(n, k) >= level:
        k += 1
    s = sorted(xs)
    return s[k - 1], s[n - k]


def decide(xs, extended):
    m = st.median(xs)
    lo, hi = interval(xs)
    line = 1 - THRESHOLD
    if m <= line and hi < 1:
        return "keep"
    if not extended and lo < line < hi:
        return "extend"
    return "discard"


def ratios(doc, arm, base=0):
    t = doc["trials"]
    return [a["cost_per_connection"] / b["cost_per_connection"]
            for a, b in zip(t[arm], t[base])
            if a["cost_per_connection"] and b["cost_per_connection"]]


def switches(arms, digits=3):
    """Each arm's context switches per connection, for a summary line."""
    return ", ".join(f"{(a['context_switches_per_connection'] or 0):.{digits}f}" for a in arms)


def cv(xs):
    return st.stdev(xs) / st.mean(xs)


def load(folder, pattern):
    return [(os.path.basename(p), records.load(p))
            for p in sorted(glob.glob(os.path.join(folder, pattern)))]


def aa(folder):
    runs = load(folder, "aa-*.json")
    if not runs:
        return
    print(f"A/A, vanilla treatment against itself, {len(runs)} runs of "
          f"{runs[0][1]['sample_count']} windows ({runs[0][1]['schedule']}):")
    pooled, firsts = [], []
    for name, d in runs:
        r = ratios(d, 1)
        c = d["comparisons"][0]
        pooled += r
        firsts.append(r)
        print(f"  {name}: cv {cv(r) * 100:.2f}%  median {c['ratio_median']:.4f} "
              f"[{c['ratio_interval'][0]:.4f}, {c['ratio_interval'][1]:.4f}]  {c['verdict']}")
    cvs = [cv(r) for r in firsts]
    print(f"  cv of window ratios: median {st.median(cvs) * 100:.2f}%, "
          f"range {min(cvs) * 100:.2f}% to {max(cvs) * 100:.2f}%; "
          f"{sum(c <= 0.015 for c in cvs)} of {len(cvs)} runs at or under 1.5%")
    # Real decisions: run i's windows, extended with run i+1's when asked.
    kept = 0
    for i, r in enumerate(firsts):
        v = decide(r, False)
        if v == "extend":
            v = decide(r + firsts[(i + 1) % len(firsts)], True)
        kept += v == "keep"
    print(f"  real A/A decisions by the keep rule: {kept} kept of {len(firsts)}")
    # Restarts and start order: windows of one epoch share server processes;
    # the arm started first alternates between epochs (0 first in even ones).
    per = 6
    within, between, first0, first1 = [], [], [], []
    for r in firsts:
        logs = [math.log(x) for x in r]
        epochs = [logs[i:i + per] for i in range(0, len(logs), per) if len(logs[i:i + per]) >= 3]
        for e, ws in enumerate(epochs):
            m = st.mean(ws)
            between.append(m)
            within += [w - m for w in ws]
            (first0 if e % 2 == 0 else first1).append(m)
    k = per
    var_w = st.pvariance(within) * len(within) / max(1, len(within) - len(between))
    var_b = st.variance(between)
    icc = max(0.0, (var_b - var_w / k) / (var_b - var_w / k + var_w)) if var_b > 0 else 0.0
    print(f"  restarts: spread of window log-ratios within an epoch {math.sqrt(var_w) * 100:.2f}%, "
          f"of epoch means {math.sqrt(var_b) * 100:.2f}% (windows alone would give "
          f"{math.sqrt(var_w / k) * 100:.2f}%); intra-epoch correlation {icc:.2f}")
    d = st.mean(first1) - st.mean(first0)
    se = math.sqrt(st.variance(first0) / len(first0) + st.variance(first1) / len(first1))
    print(f"  start order: the twin started first vs second moves the ratio by "
          f"{d * 100:+.2f}% (standard error {se * 100:.2f}%, {len(first0) + len(first1)} epochs)")
    rng = random.Random(1)
    n = len(firsts[0])
    trials, kept = 100_000, 0
    for _ in range(trials):
        s = rng.choices(pooled, k=n)
        v = decide(s, False)
        if v == "extend":
            v = decide(s + rng.choices(pooled, k=n), True)
        kept += v == "keep"
    print(f"  resampled A/A decisions ({len(pooled)} recorded windows, {trials} decisions "
          f"of {n} + {n}): {kept / trials * 100:.3f}% kept")


def planted(folder):
    runs = load(folder, "planted-[0-9]*.json")
    if not runs:
        return
    sizes = open(os.path.join(folder, "planted-sizes.txt")).read().strip()
    print(f"\nplanted costs ({sizes}), {len(runs)} runs at default settings:")
    tally = {"cheaper": [], "costlier": []}
    for name, d in runs:
        cs = d["comparisons"]
        cells = []
        for key, c in zip(["cheaper", "costlier"], cs):
            tally[key].append(c["verdict"])
            cells.append(f"{key} {c['ratio_median']:.4f} "
                         f"[{c['ratio_interval'][0]:.4f}, {c['ratio_interval'][1]:.4f}] {c['verdict']}")
        print(f"  {name}: " + "; ".join(cells))
    print(f"  4% cheaper: {tally['cheaper'].count('better')} of {len(runs)} better; "
          f"4% costlier: {tally['costlier'].count('worse')} of {len(runs)} worse")
    for name, d in load(folder, "planted2-*.json"):
        c = d["comparisons"][0]
        print(f"  2% costlier, {name}: {c['ratio_median']:.4f} "
              f"[{c['ratio_interval'][0]:.4f}, {c['ratio_interval'][1]:.4f}] {c['verdict']}")


def agreement(folder):
    duets = load(folder, "agree-*-duet.json")
    if not duets:
        return
    print("\nagreement, duet against sequential blocks (ratio of the later arm to the earlier):")
    for name, d in duets:
        b = records.load(os.path.join(folder, name.replace("-duet", "-blocks")))
        for i, c in enumerate(d["comparisons"]):
            cb = b["comparisons"][i]
            label = d["arms"][c["arm"]]["arm"]
            (dl, dh), (bl, bh) = c["ratio_interval"], cb["ratio_interval"]
            agree = dl <= bh and bl <= dh
            print(f"  {name.replace('-duet.json', '')} {label[:24]:<24} duet {c['ratio_median']:.3f} "
                  f"[{dl:.3f}, {dh:.3f}] cv {c['ratio_cv'] * 100:.1f}%  blocks "
                  f"{cb['ratio_median']:.3f} [{bl:.3f}, {bh:.3f}] cv {cb['ratio_cv'] * 100:.1f}%  "
                  f"{'agree' if agree else 'DIFFER'}")


def regime(folder):
    runs = load(folder, "regime-*.json")
    if not runs:
        return
    print("\nregimes: vanilla, the six published changes (peer) and the control, "
          "ratios to vanilla:")
    for name, d in runs:
        arms = d["arms"]
        cells = []
        for c in d["comparisons"]:
            label = "peer" if c["arm"] == 1 else "control"
            if c["ratio_median"] is None:
                cells.append(f"{label} invalid")
                continue
            lo, hi = c["ratio_interval"] or (float("nan"), float("nan"))
            spread = f"cv {c['ratio_cv'] * 100:.1f}%" if c["ratio_cv"] is not None else "no cv"
            cells.append(f"{label} {c['ratio_median']:.3f} [{lo:.3f}, {hi:.3f}] {spread}")
        cs = switches(arms)
        unsat = ", ".join(str(a.get("unsaturated_samples", 0)) for a in arms)
        reg = d.get("regime", {})
        allot = reg.get("allotment")
        share = f"{allot['quota_us']}/{allot['period_us']} us" if allot else "none"
        busy = ", ".join(f"{a['generator_busy'] * 100:.0f}%" for a in arms)
        if reg.get("alone"):
            share = ", ".join(f"{a['quota_us']}/{a['period_us']} us" for a in reg["alone"])
        print(f"  {name.replace('regime-', '').replace('.json', '')}: {'; '.join(cells)}; "
              f"cs/conn {cs}; gen busy {busy}; "
              f"unsaturated samples {unsat}; allotment {share}")
        if reg.get("warning"):
            print(f"    warning: {reg['warning']}")
    by = {n: d for n, d in runs}
    pairs = [("regime-duet-256.json", "regime-blocks-256.json", "duet vs blocks")]
    pairs += [("regime-duet-256.json", f"regime-duet-{c}.json", f"256 vs {c} in flight")
              for c in (32, 128, 384, 512)]
    for a, b, what in pairs:
        if a in by and b in by:
            for i, label in [(0, "peer"), (1, "control")]:
                x, y = by[a]["comparisons"][i]["ratio_median"], by[b]["comparisons"][i]["ratio_median"]
                if x and y:
                    print(f"  {what}, {label}: {x:.3f} vs {y:.3f}, differ by {abs(y / x - 1) * 100:.1f}%")


# Two-sided 95% quantiles of Student's t, by degrees of freedom.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365,
        8: 2.306, 9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145,
        15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086}


def schedules(folder):
    """Paired duet/blocks gaps: each pair was measured minutes apart at most,
    so the gap is free of the drift a single pair of runs inherits."""
    duets = load(folder, "schedules-*-duet.json")
    if not duets:
        return
    print(f"\nschedules, duet (12 windows) against blocks (6), {len(duets)} alternated pairs, "
          "ratios to vanilla:")
    gaps = {"peer": [], "control": []}
    for name, d in duets:
        b = records.load(os.path.join(folder, name.replace("-duet", "-blocks")))
        cells = []
        for i, label in list(enumerate(gaps))[:len(d["comparisons"])]:
            x, y = d["comparisons"][i]["ratio_median"], b["comparisons"][i]["ratio_median"]
            if x and y:
                gaps[label].append(math.log(x / y))
                cells.append(f"{label} duet {x:.3f} blocks {y:.3f}")
        print(f"  {name.replace('schedules-', '').replace('-duet.json', '')}: " + "; ".join(cells))
    for label, g in gaps.items():
        if len(g) >= 2:
            print(f"  {label}: duet / blocks {t_interval(g)} (95%, t over {len(g)} pairs)")


def t_interval(logs):
    """Mean of paired log gaps and its 95% t interval, as ratios."""
    m, se = st.mean(logs), st.stdev(logs) / math.sqrt(len(logs))
    t = T975[min(len(logs) - 1, 20)]
    return f"{math.exp(m):.3f} [{math.exp(m - t * se):.3f}, {math.exp(m + t * se):.3f}]"


def inflight(folder):
    """Paired gaps between connection counts, each against 256 measured in
    the same round, minutes apart at most."""
    runs = load(folder, "inflight-*.json")
    if not runs:
        return
    by = {}
    for name, d in runs:
        _, r, c = name[:-5].split("-")
        by.setdefault(int(r), {})[int(c)] = d
    print(f"\nconnections in flight at each server, {len(by)} rotated rounds of 12 windows, "
          "ratios to vanilla (a count whose arms switched more than 0.1 times per connection "
          "or left samples unscored was not kept busy):")
    gaps = {}
    for r in sorted(by):
        cells = []
        for c, d in sorted(by[r].items()):
            arms = d["arms"]
            cs = switches(arms, 2)
            unscored = sum(a.get("unsaturated_samples") or 0 for a in arms)
            ratios_ = [x["ratio_median"] for x in d["comparisons"][:2]]
            shown = ", ".join("none" if x is None else f"{x:.3f}" for x in ratios_)
            cells.append(f"{c}: {shown} (cs/conn {cs}; {unscored} unscored)")
        print(f"  round {r}: " + "; ".join(cells))
        base = by[r].get(256)
        for c, d in by[r].items():
            if c == 256 or base is None:
                continue
            for i, label in enumerate(["peer", "control"]):
                x, y = d["comparisons"][i]["ratio_median"], base["comparisons"][i]["ratio_median"]
                if x and y:
                    gaps.setdefault((c, label), []).append(math.log(x / y))
    for (c, label), g in sorted(gaps.items()):
        if len(g) >= 2:
            print(f"  {label}: {c} / 256 in flight {t_interval(g)} (95%, t over {len(g)} rounds)")


def manycore(folder):
    runs = load(folder, "manycore-*.json")
    if not runs:
        return
    print("\nmany-core stand-in: a 40 us fixture (one generator core saturates it) against a "
          "copy 10% dearer, with and without rationing:")
    for name, d in runs:
        c = d["comparisons"][0]
        arms = d["arms"]
        if c["ratio_median"] is None:
            cell = "invalid"
        else:
            lo, hi = c["ratio_interval"]
            cell = f"{c['ratio_median']:.3f} [{lo:.3f}, {hi:.3f}] cv {c['ratio_cv'] * 100:.1f}%"
        cs = switches(arms)
        busy = ", ".join(f"{a['sut_busy']:.2f}" for a in arms)
        print(f"  {name.replace('manycore-', '').replace('.json', '')}: {cell}; cs/conn {cs}; "
              f"sut busy {busy}; gen busy {arms[0]['generator_busy'] * 100:.0f}%")


if __name__ == "__main__":
    folder = sys.argv[1]
    aa(folder)
    planted(folder)
    agreement(folder)
    regime(folder)
    schedules(folder)
    inflight(folder)
    manycore(folder)
