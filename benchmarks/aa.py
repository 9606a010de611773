"""Summarizes an A/A record of benchmarks/emulated.sh (or referee.sh): each run's median
ratio, interval, verdict and cv, then the spread of the medians over the runs.
Usage: python3 benchmarks/aa.py RECORD_DIR"""
import glob
import records
import statistics
import sys

medians = []
for path in sorted(glob.glob(sys.argv[1] + "/aa-*.json")):
    try:
        c = records.load(path)["comparisons"][0]
    except (ValueError, KeyError, IndexError):
        continue  # a run cut short
    medians.append(c["ratio_median"])
    lo, hi = c["ratio_interval"]
    print(f"{path.split('/')[-1]}  {c['ratio_median']:.4f} [{lo:.3f}, {hi:.3f}]  {c['verdict']:<6} cv {c['ratio_cv']:.4f}")
if medians:
    print(f"{len(medians)} runs: medians {min(medians):.4f} to {max(medians):.4f} "
          f"(range {max(medians) - min(medians):.4f}, sd {statistics.pstdev(medians):.4f})")
