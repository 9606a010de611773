"""Prints the study's table from benchmarks/emulated.sh's table.json:
each arm's instructions per connection (median over samples) and its ratio
to the first arm (vanilla), with the interval and verdict."""
import records
import sys

r = records.load(sys.argv[1])
print(f"meter: {r['meter']}  samples: {r['sample_count']}  environment: {r['environment'].get('emulator')}")
ratios = {c["arm"]: c for c in r["comparisons"]}
for i, a in enumerate(r["arms"]):
    name = a["arm"].split("/")[-2] if "/" in a["arm"] else a["arm"]
    cost = a["cost_per_connection"].get("median") or 0
    c = ratios.get(i)
    ratio = "baseline" if c is None else (
        f"{c['ratio_median']:.3f} [{c['ratio_interval'][0]:.3f}, {c['ratio_interval'][1]:.3f}] {c['verdict']}"
        if c["ratio_median"] else c["verdict"])
    unsat = a.get("unsaturated_samples", 0)
    print(f"| {name} | {cost:,.0f} | {ratio} | {a['gate']['passed']} | {unsat} |")
