#!/usr/bin/env python3
"""Register, spill and SASS instruction counts of NVRTC-compiled kernels, without a GPU.

Used by `scripts/gpu/run.sh sass` (which writes the PTX, runs ptxas -v and cuobjdump -sass):
    sass_stats.py DIR [REGEX]
reads DIR/*.ptxas (ptxas -v output) and DIR/*.sass (cuobjdump -sass output) and prints, per
kernel whose name matches REGEX (default: every kernel), its registers, spill bytes (stores /
loads), SASS instruction count, mma count (HMMA/IMMA) and the instructions between its first two
BAR.SYNC — for the `mvtc_*` kernels that is one pass of the super-block loop (the part of the
kernel whose instruction count sets its speed: matvec.cu's tile loop).
"""
import pathlib
import re
import sys


def ptxas_info(text):
    """{kernel: (registers, spill stores, spill loads)} from `ptxas -v` output."""
    out = {}
    pat = re.compile(
        r"Function properties for (\w+)\n\s+\d+ bytes stack frame, (\d+) bytes spill stores, "
        r"(\d+) bytes spill loads\n.*?Used (\d+) registers",
        re.S,
    )
    for m in pat.finditer(text):
        out[m.group(1)] = (int(m.group(4)), int(m.group(2)), int(m.group(3)))
    return out


def sass_functions(text):
    """{kernel: [instruction text]} from `cuobjdump -sass` output."""
    out = {}
    for part in text.split("Function : ")[1:]:
        name = part.split("\n", 1)[0].strip()
        ins = []
        for line in part.split("\n"):
            m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
            if m:
                ins.append(m.group(1))
        out[name] = ins
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: sass_stats.py DIR [REGEX]")
    d = pathlib.Path(sys.argv[1])
    pick = re.compile(sys.argv[2] if len(sys.argv) > 2 else ".")
    # A kernel compiled in several modules (the `mvtcx_*` pairs have a body only in the module
    # of their first format, an empty stub elsewhere) is reported from the module where it has
    # the most instructions.
    info, funcs = {}, {}
    for p in sorted(d.glob("*.sass")):
        pinfo = ptxas_info(p.with_suffix(".ptxas").read_text()) if p.with_suffix(".ptxas").exists() else {}
        for name, ins in sass_functions(p.read_text()).items():
            if len(ins) > len(funcs.get(name, [])):
                funcs[name] = ins
                info[name] = pinfo.get(name, (0, 0, 0))
    print(f"{'kernel':28} {'regs':>4} {'spill st/ld':>11} {'SASS':>6} {'mma':>4} {'bar1→bar2':>9}")
    for name in sorted(funcs):
        if not pick.search(name):
            continue
        ins = funcs[name]
        regs, st, ld = info.get(name, (0, 0, 0))
        mma = sum(1 for i in ins if "HMMA" in i or "IMMA" in i)
        bars = [k for k, i in enumerate(ins) if "BAR.SYNC" in i]
        loop = str(bars[1] - bars[0]) if len(bars) > 1 else "-"
        print(f"{name:28} {regs:4} {st:5}/{ld:<5} {len(ins):6} {mma:4} {loop:>9}")


if __name__ == "__main__":
    main()
