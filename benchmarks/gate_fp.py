"""Summarizes a gate-fp record: per shape, compares and how many passed
(a compare that printed nothing failed: ratchet stopped), trials,
deferred_work failures, and the server's CPU time outside its windows as a
share of the time in them (median, 99th percentile, max), with the phase of
the largest; then what the hostile servers failed with.

    python3 benchmarks/gate_fp.py benchmarks/runs/gate-fp-<time>
"""
import glob
import json
import os
import sys

PHASES = ("stopping", "queueing", "between", "judging")


def load(path):
    """The compare's document, or None where it printed none."""
    try:
        return json.load(open(path))
    except (json.JSONDecodeError, OSError):
        return None


def groups(doc, shape):
    """The file's trials by shape: an A/A's both arms are its shape; a
    file of several servers (the pilot's check) splits by arm."""
    labels = [a["arm"] for a in doc["arms"]]
    for label, trials in zip(labels, doc["trials"]):
        name = shape if len(set(labels)) == 1 else label.split("--mode ")[-1].split("/")[-1]
        yield name, trials


def share(m):
    inside = sum(b["busy_ns"] for b in m.get("batches", []) if b["scored"])
    out = m.get("between_windows_ns")
    return None if out is None or not inside else out / inside


def worst_phase(m):
    totals = {p: 0 for p in PHASES}
    for b in m.get("batches", []):
        if b["scored"]:
            for p in PHASES:
                totals[p] += b.get("outside", {}).get(p, 0)
    return max(totals, key=totals.get), totals


def seed(path):
    return int(os.path.basename(path).rsplit("-", 1)[1].split(".")[0])


def main(run):
    shapes, compares = {}, {}
    for path in sorted(glob.glob(os.path.join(run, "*-*.json")), key=lambda p: (os.path.basename(p).rsplit("-", 1)[0], seed(p))):
        shape = os.path.basename(path).rsplit("-", 1)[0]
        doc = load(path)
        passed = doc is not None and all(a["gate"]["passed"] for a in doc["arms"])
        compares.setdefault(shape, []).append(passed)
        if doc is None:
            print(f"{os.path.basename(path)}: the compare printed no document (ratchet stopped)")
            continue
        for name, ts in groups(doc, shape):
            shapes.setdefault(name, []).extend(ts)
    print("| shape | compares | passed (longest run in a row) | trials | deferred_work | other gate failures | outside / inside: median | 99th pct | max | largest phase of the max |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for shape, ms in shapes.items():
        runs = compares.get(shape, [])
        longest = cur = 0
        for ok in runs:
            cur = cur + 1 if ok else 0
            longest = max(longest, cur)
        deferred = sum("deferred_work" in m["gate"]["reasons"] for m in ms)
        other = sum(not m["gate"]["passed"] and "deferred_work" not in m["gate"]["reasons"] for m in ms)
        shares = sorted((share(m), m) for m in ms if share(m) is not None)
        if not shares:
            continue
        q = lambda f: shares[min(len(shares) - 1, int(f * len(shares)))][0]
        top = shares[-1][1]
        phase, totals = worst_phase(top)
        print(f"| {shape} | {len(runs)} | {sum(runs)} ({longest}) | {len(ms)} | {deferred} | {other} | {q(0.5):.4%} | {q(0.99):.4%} | {shares[-1][0]:.4%} | {phase} ({totals[phase]} ns) |")
    hostile = os.path.join(run, "hostile.json")
    if os.path.exists(hostile):
        doc = json.load(open(hostile))
        for a in doc["arms"]:
            print(f"hostile {a['arm']}: passed {a['gate']['passed']}, reasons {sorted(a['gate']['reasons'])}")


if __name__ == "__main__":
    main(sys.argv[1])
