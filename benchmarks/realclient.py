#!/usr/bin/env python3
"""Helpers of benchmarks/realclient.sh (python3 standard library only).

    realclient.py order SEED ROUND COUNT
        the indices 0..COUNT-1 in the round's own shuffled order, one a line
        (random.Random seeded with "SEED/ROUND": the same for the same seed)
    realclient.py commands BUILD_JSON OUTDIR
        the arms of a `ratchet build --json` document, each written to
        OUTDIR/arm<i>/{label,source,env,args} (see realclient.sh)
    realclient.py summarize RECORD
        RECORD/summary.md from RECORD/runs.tsv, arms.tsv and facts.tsv
"""
import csv
import json
import math
import os
import random
import statistics as st
import sys


def order(seed, rnd, count):
    idx = list(range(int(count)))
    random.Random(f"{seed}/{rnd}").shuffle(idx)
    print("\n".join(map(str, idx)))


def commands(build_json, outdir):
    """One directory per arm of the document `ratchet build --json` prints:
    a list of {"arm", "command": {"program", "args", "env", "port_args",
    "family"}, "source_sha256", "binary_sha256"}, in the order asked."""
    with open(build_json) as f:
        doc = json.load(f)
    if not isinstance(doc, list):
        sys.exit("realclient.py: ratchet build --json did not print a list of arms")
    for i, a in enumerate(doc):
        cmd = a["command"]
        if cmd.get("family", "ipv4") != "ipv4":
            sys.exit(f"realclient.py: {a['arm']}: family {cmd['family']}: ab here drives 127.0.0.1 only")
        d = os.path.join(outdir, f"arm{i}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "label"), "w") as f:
            f.write(a["arm"] + "\n")
        with open(os.path.join(d, "source"), "w") as f:
            f.write("\t".join([cmd["program"], a.get("source_sha256") or "-",
                               a.get("binary_sha256") or "-"]) + "\n")
        with open(os.path.join(d, "env"), "w") as f:
            for k, v in cmd.get("env", []):
                f.write(f"{k}={v}\n")
        with open(os.path.join(d, "args"), "w") as f:
            for x in list(cmd.get("args", [])) + list(cmd.get("port_args", ["--port", "{port}"])):
                if "\n" in x:
                    sys.exit(f"realclient.py: {a['arm']}: an argument with a newline")
                f.write(x + "\n")


def read_tsv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def fmt(x, digits):
    return "-" if x is None else f"{x:,.{digits}f}"


def span(xs, digits=3):
    return "-" if not xs else f"{min(xs):.{digits}f} – {max(xs):.{digits}f}"


def ratios(runs, arm, ref, column):
    """Per round: the arm's value over the reference's in the same round,
    where both runs of that round are ok."""
    by = {}
    for r in runs:
        if r["status"] == "ok" and num(r[column]) is not None:
            by[(r["arm"], r["round"])] = num(r[column])
    out = []
    for rnd in sorted({r["round"] for r in runs}, key=int):
        a, b = by.get((arm, rnd)), by.get((ref, rnd))
        if a is not None and b:
            out.append(a / b)
    return out


def summarize(record):
    runs = read_tsv(os.path.join(record, "runs.tsv"))
    arms = read_tsv(os.path.join(record, "arms.tsv"))
    facts = {r["fact"]: r["value"] for r in read_tsv(os.path.join(record, "facts.tsv"))}
    ref = arms[0]["arm"]
    rounds = int(facts["rounds"])
    n = int(facts["requests"])
    clk = int(facts["clk_tck"])
    name = {a["arm"]: a["name"] for a in arms}
    # No more digits than one tick per run resolves.
    tick_us = 1e6 / clk
    dig = max(0, math.ceil(-math.log10(tick_us / n)))
    ok = lambda arm: [r for r in runs if r["arm"] == arm and r["status"] == "ok"]
    med = lambda xs: st.median(xs) if xs else None

    L = []
    w = L.append
    w(f"# ab against the treatment's servers: core-1 busy time per connection\n")
    w(f"{facts['started']} to {facts['finished']}; {rounds} rounds, each running every server "
      f"once in its own shuffled order (seed {facts['seed']}); every run: a fresh server on core 1 as "
      f"{facts['sut_user']}, `ab -n {n} -c {facts['concurrency']}` on core 0 after a "
      f"{facts['warmup']}-request warm-up; mode {facts['mode']}. Servers built by ratchet "
      f"({facts['binaries_from']}).\n")
    w(f"Ratios are to **{name[ref]}** (`{ref}`), taken within each round, so drift between rounds "
      f"cancels; the median and the min–max are over the rounds where both runs were ok.\n")

    w("## Core 1 busy time per connection\n")
    w("Core 1 busy = user+nice+system+irq+softirq of `/proc/stat`'s `cpu1` over exactly the measured "
      "ab run (steal excluded), from USER_HZ ticks converted to µs, divided by ab's completed requests. "
      "It is everything core 1 did: the server, its kernel work, softirq work of both ends that "
      "landed there, and anything else scheduled there.\n")
    w("| server | runs ok | median µs/conn | ratio to " + name[ref] + " (median of rounds) | min – max | rounds |")
    w("|---|---:|---:|---:|---:|---:|")
    for a in arms:
        arm = a["arm"]
        good = ok(arm)
        rs = ratios(runs, arm, ref, "cpu1_busy_us_per_conn")
        w(f"| {a['name']} | {len(good)}/{rounds} | "
          f"{fmt(med([num(r['cpu1_busy_us_per_conn']) for r in good]), dig)} | "
          f"{'1 (reference)' if arm == ref else fmt(med(rs), 3)} | "
          f"{'' if arm == ref else span(rs)} | {'' if arm == ref else len(rs)} |")
    w("")

    task = [r for r in runs if num(r["server_task_us"]) is not None]
    if task:
        w("## The server's own CPU time per connection (cross-check)\n")
        w("From its cgroup's `cpu.stat` `usage_usec` (the scheduler's runtime of the server's tasks, "
          "in µs, not tick-sampled; softirq work that ran in its context is in it, other softirq "
          "work on core 1 is not), divided by completed requests.\n")
        w("| server | median µs/conn | ratio to " + name[ref] + " (median of rounds) | min – max | rounds | "
          "median share of core 1 busy time outside the server's tasks |")
        w("|---|---:|---:|---:|---:|---:|")
        for a in arms:
            arm = a["arm"]
            rs = ratios(runs, arm, ref, "server_task_us_per_conn")
            outside = [1 - num(r["server_task_us"]) / num(r["cpu1_busy_us"]) for r in ok(arm)
                       if num(r["server_task_us"]) is not None and num(r["cpu1_busy_us"])]
            w(f"| {a['name']} | {fmt(med([num(r['server_task_us_per_conn']) for r in ok(arm)]), 2)} | "
              f"{'1 (reference)' if arm == ref else fmt(med(rs), 3)} | "
              f"{'' if arm == ref else span(rs)} | {'' if arm == ref else len(rs)} | "
              f"{fmt(med(outside), 2)} |")
        w("")
        w("The last column, 1 - server time / core 1 busy time (the one precise, the other "
          "tick-sampled, so only roughly), is what core 1 did besides the server: softirq work "
          "outside its context, kernel threads, and other processes. A large or uneven share "
          "means the machine was not quiet.\n")

    w("## Load\n")
    w("Core 0 runs ab: its busy share near 1 means the generator, not the server, set the pace, "
      "and the server slept between arrivals (its cost then includes waking up).\n")
    capped = facts["mode"].startswith("capped")
    hdr = "| server | median requests/s (ab) | median core 0 busy share | median core 1 busy share | max core 1 steal share |"
    if capped:
        hdr += " median throttled share of periods |"
    w(hdr)
    w("|---|---:|---:|---:|---:|" + ("---:|" if capped else ""))
    for a in arms:
        good = ok(a["arm"])
        steal = [num(r["cpu1_steal_ticks"]) / num(r["cpu1_total_ticks"]) for r in good
                 if num(r["cpu1_total_ticks"])]
        line = (f"| {a['name']} | {fmt(med([num(r['rps']) for r in good]), 0)} | "
                f"{fmt(med([num(r['core0_busy_share']) for r in good]), 2)} | "
                f"{fmt(med([num(r['cpu1_busy_share']) for r in good]), 2)} | "
                f"{fmt(max(steal) if steal else None, 3)} |")
        if capped:
            th = [num(r["throttled_periods"]) / num(r["periods"]) for r in good
                  if num(r["periods"])]
            line += f" {fmt(med(th), 2)} |"
        w(line)
    w("")

    failed = [r for r in runs if r["status"] != "ok"]
    w("## Failed runs\n")
    if failed:
        w("Each is left out of the medians and ratios above, and named here:\n")
        for r in failed:
            w(f"- round {r['round']}, {name.get(r['arm'], r['arm'])}: {r['status']} "
              f"(complete {r['complete']}, failed {r['failed']}, non-2xx {r['non2xx']})")
    else:
        w(f"None: every run completed {n} requests with 0 failed and 0 non-2xx.")
    w("")

    k = rounds
    busy_ticks = [num(r["cpu1_busy_ticks"]) for r in runs if r["status"] == "ok"
                  and num(r["cpu1_busy_ticks"]) is not None]
    ticks_note = ""
    if busy_ticks:
        mt = st.median(busy_ticks)
        ticks_note = (f"The runs here measured a median of {mt:.0f} ticks of core 1 busy time each"
                      + (f": one tick is {100 / mt:.1f}% of that. " if mt > 0 else ". "))
    w("## What an interval this small can and cannot resolve\n")
    if k >= 2:
        w(f"With {k} rounds, the min–max of {k} independent per-round ratios covers the median of their "
          f"distribution with probability {1 - 2 ** (1 - k):.4f} (1 - 2^(1-{k}), distribution-free, if the "
          f"rounds are independent and alike); a round that failed leaves fewer ratios and less coverage. "
          f"A change is resolved only when its whole min–max lies on one side of 1, and a difference "
          f"smaller than the width of that range is not resolved at all.")
    else:
        w("With one round there is one ratio per server and no interval: it resolves nothing.")
    w(f"Core 1 busy time is tick-sampled by the kernel "
      f"(accounting: {facts.get('cpu_accounting', 'unknown')}, HZ {facts.get('config_hz', 'unknown')}) "
      f"and reported in ticks of {tick_us:.0f} µs: a run of {n} connections cannot show less than "
      f"{tick_us / n:.2f} µs per connection, and its sampling error is larger. "
      f"{ticks_note}"
      f"What it cannot say: how these ratios hold at another time (ratchet measured task-clock ratios "
      f"on this kind of VM moving between compares minutes apart by about 3.5% sd of their log, "
      f"`meter.task_clock_drift`), or on another machine. " + (
          "Here each server was held to its quota, so it had work whenever ab kept ahead of it "
          "(the throttled share of periods says whether it did); the quota charges its tasks' time, "
          "not the softirq work on core 1 outside them, which the busy time still counts.\n"
          if capped else
          "Nor what a server costs when saturated (ratchet's referee): here each server answers one "
          "generator on one core and sleeps between arrivals whenever the generator is the limit.\n"))
    with open(os.path.join(record, "summary.md"), "w") as f:
        f.write("\n".join(L))


def main(argv):
    if len(argv) == 5 and argv[1] == "order":
        order(argv[2], argv[3], argv[4])
    elif len(argv) == 4 and argv[1] == "commands":
        commands(argv[2], argv[3])
    elif len(argv) == 3 and argv[1] == "summarize":
        summarize(argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
