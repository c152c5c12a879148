#!/usr/bin/env python3
"""Where one kernel launch's time goes, per SASS instruction, from an Nsight Compute source page
(`--section SourceCounters --page source --print-source sass --csv`), for
`scripts/gpu/run.sh ncu-src`:
    ncu_src.py FILE.csv [WARPS]
Lines before the CSV header (the profiled program's own output) are skipped. Prints the executed
warp instructions (and per warp, given WARPS = the launch's warps), the warp-stall samples and
their reasons in %, the regions between block barriers (BAR.SYNC) with their instructions and
samples (regions never reached left out), and the 25 instructions with the most samples. Exit 2 when the file has no source page.
"""
import csv
import io
import sys


def num(text):
    """A number of ncu's CSV ("1,234" or ""), 0 when empty."""
    text = text.replace(",", "").strip()
    return float(text) if text else 0.0


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    lines = open(sys.argv[1], encoding="utf-8", errors="replace").read().split("\n")
    start = next((i for i, l in enumerate(lines) if l.startswith('"Address","Source"')), None)
    if start is None:
        print(f"{sys.argv[1]}: no source page (a line starting \"Address\",\"Source\")", file=sys.stderr)
        return 2
    table = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    head, rows = table[0], [r for r in table[1:] if len(r) == len(table[0])]
    col = {h: i for i, h in enumerate(head)}
    samples_col, exec_col = col["Warp Stall Sampling (All Samples)"], col["Instructions Executed"]
    stalls = [h for h in head if h.startswith("stall_") and "(Not Issued)" not in h]
    samples = sum(num(r[samples_col]) for r in rows)
    executed = sum(num(r[exec_col]) for r in rows)
    warps = int(sys.argv[2]) if len(sys.argv) == 3 else 0
    per_warp = f" ({executed / warps:.0f} per warp of {warps})" if warps else ""
    print(f"{len(rows)} SASS instructions, {executed:.0f} warp instructions executed{per_warp}, "
          f"{samples:.0f} stall samples")
    if samples:
        reasons = sorted(((sum(num(r[col[h]]) for r in rows), h) for h in stalls), reverse=True)
        print("stall samples: " + ", ".join(f"{h[6:]} {100 * v / samples:.1f} %" for v, h in reasons if v))
    # regions between block barriers
    print("regions (SASS index range: executed warp instructions, samples):")
    lo, ex, sm = 0, 0.0, 0.0
    for i, r in enumerate(rows):
        ex += num(r[exec_col])
        sm += num(r[samples_col])
        if "BAR.SYNC" in r[1] or i == len(rows) - 1:
            if ex or sm:  # (regions never reached are left out)
                pw = f" ({ex / warps:.0f} per warp)" if warps else ""
                print(f"  {lo:5d}-{i:5d}: {ex:9.0f}{pw}, samples {sm:.0f}")
            lo, ex, sm = i + 1, 0.0, 0.0
    print("top instructions by samples (index, SASS, samples, executed, top reasons):")
    order = sorted(range(len(rows)), key=lambda k: -num(rows[k][samples_col]))
    for k in order[:25]:
        r = rows[k]
        if not num(r[samples_col]):
            break
        top = sorted(((num(r[col[h]]), h[6:]) for h in stalls), reverse=True)[:2]
        why = ", ".join(f"{h} {v:.0f}" for v, h in top if v)
        print(f"  {k:5d} {r[1].strip()[:56]:56s} {num(r[samples_col]):4.0f} {num(r[exec_col]):7.0f}  {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
