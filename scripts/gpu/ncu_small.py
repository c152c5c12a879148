#!/usr/bin/env python3
"""Per-kernel durations of decode-shaped launches from an Nsight Compute CSV (`--csv --page raw`
with the metric gpu__time_duration.sum), for `scripts/gpu/run.sh ncu`:
    ncu_small.py FILE.csv
Lines that are not CSV rows of ncu (the profiled program's own output) are skipped. A launch is
decode-shaped when it works on one token: grid y = 1 for attention_f32 (and its d256 / d512 kernels), qkv_post_f32 and
geglu_prep_f32 (their grid is (heads or pieces, tokens, splits)), grid x = 1 for add_norm_prep_f32
(one block per token); any other kernel's launches are all counted. Prints, per kernel, the decode-shaped
launch count and their mean, median, min and max duration in µs, then the same for all launches.
"""
import csv
import statistics
import sys

SCALE = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}


def grid(text):
    """(x, y, z) of ncu's "(x, y, z)" grid text."""
    parts = [int(p) for p in text.strip("() ").split(",")]
    return tuple(parts + [1] * (3 - len(parts)))


def decode_shaped(name, g):
    if name in ("attention_f32", "attention_d256_f32", "attention_d512_f32", "attention_d256_h2_f32",
                "attention_d512_h2_f32", "qkv_post_f32", "geglu_prep_f32"):
        return g[1] == 1
    if name == "add_norm_prep_f32":
        return g[0] == 1
    return True


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: ncu_small.py FILE.csv")
    rows = [l for l in open(sys.argv[1], encoding="utf-8", errors="replace") if l.startswith('"')]
    table = list(csv.reader(rows))
    if len(table) < 3:
        sys.exit(f"ncu_small: no ncu rows in {sys.argv[1]}")
    head, units = table[0], table[1]
    try:
        kn, gs, du = head.index("Kernel Name"), head.index("Grid Size"), head.index("gpu__time_duration.sum")
    except ValueError as e:
        sys.exit(f"ncu_small: column missing: {e}")
    scale = SCALE.get(units[du].strip(), None)
    if scale is None:
        sys.exit(f"ncu_small: unknown duration unit {units[du]!r}")
    dec, every = {}, {}
    for r in table[2:]:
        if len(r) <= max(kn, gs, du) or not r[du]:
            continue
        name, g, us = r[kn], grid(r[gs]), float(r[du].replace(",", "")) * scale
        every.setdefault(name, []).append(us)
        if decode_shaped(name, g):
            dec.setdefault(name, []).append(us)
    for title, d in (("decode-shaped launches", dec), ("all launches", every)):
        print(f"{title} (µs at ncu's locked clocks):")
        for name in sorted(d):
            v = d[name]
            print(f"  {name:20} n={len(v):5d} mean {statistics.mean(v):8.2f} median "
                  f"{statistics.median(v):8.2f} min {min(v):8.2f} max {max(v):8.2f}")


if __name__ == "__main__":
    main()
