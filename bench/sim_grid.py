#!/usr/bin/env python3
"""The full simulator grid of issue 32 item 4: traces x ratios x copy bandwidths x policies.

Drives tp-sim (one `--sweep` per trace and bandwidth; tp-sim has no multi-bandwidth mode) with
its defaults, which are the runtime's (expandable segments, lending, Note [The simulator's
defaults] in sim/simulator.hpp), and prints a markdown table per trace, then the cells where the
default policy (hybrid) breaks one of the three properties the issue asks for:

  within 2%  hybrid's slowdown <= 1.02 x the better of lru (swap only) and dtr (recompute only),
             wherever either fits;
  fits       hybrid fits wherever lru or dtr fits;
  monotone   hybrid's slowdown does not fall as the ratio falls (and it fits at every ratio above
             one where it fits), at each bandwidth.

Usage: python3 bench/sim_grid.py [--tp-sim build/sim/tp-sim] > out.md
The simulator is deterministic: one run per cell.
"""

import argparse
import re
import subprocess
import sys
import time

RATIOS = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
BANDWIDTHS = [8, 12, 25, 50]  # GB/s per direction; latency stays tp-sim's default (5 us)
POLICIES = ["lru", "dtr", "capuchin", "hybrid"]

# DTR's public logs: budgets as ratios of DTR's baseline peak, with DTR's simulator's figures
# beside them (bench/traces/dtr/README.md, "Reference"; DTR's setting: recompute only, bytes
# counted, no allocator, nothing lent, no copies).
DTR_LOGS = [
    ("dtr/resnet32-bs56.log", 10061179152, [1.013, 1.025, 1.046, 1.074, 1.107, 1.140, 1.179, 1.332]),
    ("dtr/transformer-bs10.log", 9864405000, [1.009, 1.020, 1.031, 1.044, 1.058, 1.091, 1.124, 1.545]),
]
# The recorded CPU traces: operator times scaled by 0.01 as in every other published tp-sim figure
# (bench/results/sim_recorded.md); ratios of tp-sim's own unconstrained peak (expandable segments).
RECORDED = ["resnet18.trace", "transformer.trace", "lstm.trace"]


def trace_args(name):
    for file, peak, ref in DTR_LOGS:
        if file == name:
            return ["--ratio-of", str(peak), "--reference", ",".join(f"{x:.3f}" for x in ref)]
    return ["--compute-scale", "0.01"]


def command(tp_sim, name, bandwidth):
    return [tp_sim, f"bench/traces/{name}", "--sweep", "--bandwidth", str(bandwidth),
            "--ratios", ",".join(str(r) for r in RATIOS)] + trace_args(name)


def run(tp_sim, name, bandwidth):
    """{ratio: {policy: slowdown or None (out of memory)}}, {ratio: reference}."""
    out = subprocess.run(command(tp_sim, name, bandwidth), check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("| ratio | budget |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    cells, refs = {}, {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        row = dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
        ratio = float(row["ratio"])
        cells[ratio] = {p: (None if row[p] == "no" else float(row[p])) for p in POLICIES}
        if "reference" in row:
            refs[ratio] = row["reference"]
    return cells, refs


def fmt(x):
    return "no" if x is None else f"{x:.3f}"


def check(name, bandwidth, cells):
    """The cells where hybrid breaks a property, as (kind, text)."""
    bad = []
    fitted_above = True
    previous = None  # hybrid's slowdown at the next larger ratio
    for ratio in RATIOS:
        c = cells[ratio]
        h = c["hybrid"]
        singles = [c[p] for p in ("lru", "dtr") if c[p] is not None]
        where = f"{name} {bandwidth} GB/s {ratio}"
        if singles and h is None:
            bad.append(("fits", f"{where}: hybrid no, lru {fmt(c['lru'])}, dtr {fmt(c['dtr'])}"))
        if singles and h is not None and h > 1.02 * min(singles) + 1e-9:
            best = min(singles)
            bad.append(("within 2%", f"{where}: hybrid {h:.3f}, lru {fmt(c['lru'])}, dtr {fmt(c['dtr'])} "
                                     f"({h / best:.3f}x the better)"))
        if h is not None:
            if not fitted_above:
                bad.append(("monotone", f"{where}: hybrid fits ({h:.3f}) but not at a larger ratio"))
            if previous is not None and h < previous:
                bad.append(("monotone", f"{where}: hybrid {h:.3f}, {previous:.3f} at the ratio above"))
            previous = h if previous is None else max(previous, h)
        else:
            fitted_above = False
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tp-sim", default="build/sim/tp-sim")
    args = ap.parse_args()

    started = time.monotonic()
    names = [f for f, _, _ in DTR_LOGS] + RECORDED
    violations = []
    print("Every cell: slowdown (step time / the unconstrained step); `no`: out of memory. "
          "`best single`: the better of `lru` and `dtr`; `hybrid / best`: hybrid over it.\n")
    for name in names:
        print(f"## {name}\n")
        print("`" + " ".join(command(args.tp_sim, name, "B")[1:]) + "`\n")
        grid = {b: run(args.tp_sim, name, b) for b in BANDWIDTHS}
        has_ref = bool(grid[BANDWIDTHS[0]][1])
        head = ["GB/s", "ratio"] + (["DTR's simulator"] if has_ref else []) + POLICIES + ["best single", "hybrid / best"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for b in BANDWIDTHS:
            cells, refs = grid[b]
            for ratio in RATIOS:
                c = cells[ratio]
                singles = [c[p] for p in ("lru", "dtr") if c[p] is not None]
                best = min(singles) if singles else None
                rel = "" if best is None or c["hybrid"] is None else f"{c['hybrid'] / best:.3f}"
                row = [str(b), str(ratio)] + ([refs.get(ratio, "")] if has_ref else [])
                row += [fmt(c[p]) for p in POLICIES] + [fmt(best), rel]
                print("| " + " | ".join(row) + " |")
            violations += check(name, b, cells)
        print()
    print("## Where hybrid breaks a property\n")
    for kind in ("within 2%", "fits", "monotone"):
        found = [t for k, t in violations if k == kind]
        print(f"**{kind}** ({len(found)} cells)" + (":" if found else ": none") + "\n")
        for t in found:
            print(f"- {t}")
        if found:
            print()
    print(f"<!-- {len(names) * len(BANDWIDTHS)} tp-sim runs in {time.monotonic() - started:.1f} s -->")


if __name__ == "__main__":
    sys.exit(main())
