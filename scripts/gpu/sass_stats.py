#!/usr/bin/env python3
"""Register, spill and SASS instruction counts of NVRTC-compiled kernels, without a GPU.

Used by `scripts/gpu/run.sh sass` (which writes the PTX, runs ptxas -v and cuobjdump -sass):
    sass_stats.py DIR [REGEX] [--against OLD_DIR]
reads DIR/*.ptxas (ptxas -v output) and DIR/*.sass (cuobjdump -sass output) and prints, per
kernel whose name matches REGEX (default: every kernel), its registers, spill bytes (stores /
loads), SASS instruction count, mma count (HMMA/IMMA), the instructions between its first two
BAR.SYNC, and of its main loop (the backward branch's span holding the most mma, else the
longest): its length and how many of its instructions issue to the integer ALU pipe and to the
FMA pipe (opcode lists ALU_OPS, FMA_OPS below). For the `mvtc_*` kernels the loop is one pass
over a super-block (matvec.cu's tile loop), and its ALU count is what bounds them (Nsight Compute
of mvtc_q2_k_1w: ALU pipe 60 % of peak, FMA 11 %; matvec.cu beside TC_WARPS). With --against
OLD_DIR (a copy of an earlier run's output folder) each kernel found in both also gets the old
figures and the main-loop opcodes whose counts differ (old → new): where a change's instructions
went.
"""
import pathlib
import re
import sys
from collections import Counter


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
        ins, addrs = [], []
        for line in part.split("\n"):
            m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
            if m:
                addrs.append(int(m.group(1), 16))
                ins.append(m.group(2))
        out[name] = (ins, addrs)
    return out


# Opcodes (before the first '.') issued to the integer ALU pipe and to the FMA pipe on sm_80/90.
ALU_OPS = {"PRMT", "LOP3", "SHF", "IADD3", "SEL", "ISETP", "LEA", "VIADD", "VIMNMX", "IABS",
           "FSEL", "PLOP3", "MOV", "IMNMX", "FSETP", "BMSK", "SGXT", "FLO", "POPC"}
FMA_OPS = {"IMAD", "IMUL", "FFMA", "FMUL", "FADD", "HFMA2", "HADD2", "HMUL2"}


def opcode(ins):
    """The opcode of one SASS instruction without its predicate and modifiers."""
    words = ins.split()
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def main_loop(ins, addrs):
    """The instructions of the span [target, branch] of the backward branch whose span holds the
    most mma (ties and mma-free kernels: the longest), or [] when there is none."""
    index = {a: k for k, a in enumerate(addrs)}
    best, key = [], (-1, -1)
    for k, i in enumerate(ins):
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", i)
        if not m:
            continue
        t = int(m.group(1), 16)
        if t < addrs[k] and t in index:
            span = ins[index[t]:k + 1]
            kk = (sum(1 for x in span if "HMMA" in x or "IMMA" in x), len(span))
            if kk > key:
                best, key = span, kk
    return best


def load(d):
    """({kernel: (registers, spill stores, spill loads)}, {kernel: (instructions, addresses)}) of
    the .sass/.ptxas files in folder d. A kernel compiled in several modules (the `mvtcx_*` pairs
    have a body only in the module of their first format, an empty stub elsewhere) is taken from
    the module where it has the most instructions."""
    info, funcs = {}, {}
    for p in sorted(pathlib.Path(d).glob("*.sass")):
        pinfo = ptxas_info(p.with_suffix(".ptxas").read_text()) if p.with_suffix(".ptxas").exists() else {}
        for name, (ins, addrs) in sass_functions(p.read_text()).items():
            if len(ins) > len(funcs.get(name, ([], []))[0]):
                funcs[name] = (ins, addrs)
                info[name] = pinfo.get(name, (0, 0, 0))
    return info, funcs


def loop_diff(old, new):
    """Lines `OPCODE old → new` for the full opcodes (modifiers kept) whose count differs between
    two instruction lists (main loops), largest change first."""
    def full(i):
        words = i.split()
        return words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    a, b = Counter(full(i) for i in old), Counter(full(i) for i in new)
    ops = sorted(set(a) | set(b), key=lambda o: (-abs(b[o] - a[o]), o))
    return [f"    {o:28} {a[o]:4} → {b[o]:4}" for o in ops if a[o] != b[o]]


USAGE = "usage: sass_stats.py DIR [REGEX] [--against OLD_DIR]"


def main():
    args = sys.argv[1:]
    against = None
    if "--against" in args:
        k = args.index("--against")
        if k + 1 >= len(args):
            sys.exit(USAGE)
        against = args[k + 1]
        del args[k:k + 2]
    if not args:
        sys.exit(USAGE)
    pick = re.compile(args[1] if len(args) > 1 else ".")
    info, funcs = load(args[0])
    old_info, old_funcs = load(against) if against else ({}, {})
    print(f"{'kernel':28} {'regs':>4} {'spill st/ld':>11} {'SASS':>6} {'mma':>4} {'bar1→bar2':>9}"
          f" {'loop':>5} {'ALU':>4} {'FMA':>4}")
    for name in sorted(funcs):
        if not pick.search(name):
            continue
        ins, addrs = funcs[name]
        regs, st, ld = info.get(name, (0, 0, 0))
        mma = sum(1 for i in ins if "HMMA" in i or "IMMA" in i)
        bars = [k for k, i in enumerate(ins) if "BAR.SYNC" in i]
        loop = str(bars[1] - bars[0]) if len(bars) > 1 else "-"
        body = main_loop(ins, addrs)
        alu = sum(1 for i in body if opcode(i) in ALU_OPS)
        fma = sum(1 for i in body if opcode(i) in FMA_OPS)
        print(f"{name:28} {regs:4} {st:5}/{ld:<5} {len(ins):6} {mma:4} {loop:>9} {len(body):5} {alu:4} {fma:4}")
        if against and name in old_funcs:
            oins, oaddrs = old_funcs[name]
            oregs, ost, old_ = old_info.get(name, (0, 0, 0))
            obody = main_loop(oins, oaddrs)
            print(f"  against {against}: regs {oregs} → {regs}, spill {ost}/{old_} → {st}/{ld}, "
                  f"SASS {len(oins)} → {len(ins)}, loop {len(obody)} → {len(body)}")
            for line in loop_diff(obody, body):
                print(line)


if __name__ == "__main__":
    main()
