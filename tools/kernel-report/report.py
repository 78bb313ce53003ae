#!/usr/bin/env python3
"""The static kernel report: what the compiler made of every kernel instantiation, without a GPU.

Reads the `-Xptxas -v` log of a device-only sm_90 compile (registers, spills, stack frame, static
shared memory per instantiation) and, when given, its SASS from `cuobjdump -sass` (the hot loops:
instructions, global loads and stores and their widths, local-memory traffic, subroutine calls).
Checks every kernel template against the budget written next to it in kernels/tessel/kernels/*.cuh:

    // budget: threads 256, registers 40, hot

  threads N     the block size the library launches it with (for the occupancy column)
  registers N   the most registers any instantiation may use
  hot           no instantiation may spill or have a stack frame
  wide          the hot loop's global loads are 16 bytes wide (in every instantiation whose
                first template argument, if a number, is a vector width V > 1)
  mainloop F    a matrix product: its hot loop is the main loop (the innermost loop issuing
                tensor-core mma, or else FMAs fed from shared memory), which may issue at most F
                instructions per math instruction (HMMA/IMMA/DMMA or FFMA/DFMA)

Usage:
  report.py check    --ptxas LOG [--sass SASS] --kernels DIR     exit 1 on a broken budget
  report.py markdown --ptxas LOG --sass SASS --kernels DIR --out FILE [--json FILE]
"""
import argparse
import json
import os
import re
import subprocess
import sys
from collections import defaultdict

# sm_90 (Hopper) per-SM limits, from the CUDA occupancy calculator's table for compute capability 9.0.
SM90 = dict(registers=65536, register_unit=256, max_warps=64, max_blocks=32, smem=233472, smem_unit=128,
            smem_reserved_per_block=1024, issue_per_cycle=128)
# H200: 4.8 TB/s over 132 SMs at 1.98 GHz is 18.4 bytes per SM per cycle, against 128 thread
# instructions issued per SM per cycle: a loop issuing more than ~7 instructions per byte it moves
# cannot keep up with memory even at full issue rate.
H200_BYTES_PER_SM_CYCLE = 4.8e12 / (132 * 1.98e9)

SCALARS = [("__nv_bfloat16", 2), ("__half", 2), ("__nv_fp8_e4m3", 1), ("__nv_fp8_e5m2", 1), ("double", 8), ("float", 4),
           ("unsigned long", 8), ("unsigned int", 4), ("unsigned short", 2), ("unsigned char", 1), ("signed char", 1),
           ("long", 8), ("int", 4), ("short", 2), ("bool", 1), ("char", 1)]


def demangle(names):
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout.splitlines()
    return dict(zip(names, out))


def parse_ptxas(path):
    """mangled name -> {registers, barriers, smem, stack, spill_stores, spill_loads}"""
    kernels, current = {}, None
    for line in open(path, errors="replace"):
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = m.group(1)
            kernels[current] = dict(registers=0, barriers=0, smem=0, stack=0, spill_stores=0, spill_loads=0)
            continue
        if current is None:
            continue
        k = kernels[current]
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            k["stack"], k["spill_stores"], k["spill_loads"] = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            k["registers"] = int(m.group(1))
            b = re.search(r"used (\d+) barriers", line)
            s = re.search(r"(\d+) bytes smem", line)
            k["barriers"] = int(b.group(1)) if b else 0
            k["smem"] = int(s.group(1)) if s else 0
    return kernels


INSTRUCTION = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(@!?U?P[0-9T]+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
BRANCH_TARGET = re.compile(r"0x([0-9a-f]+)\s*$")


def parse_sass(path):
    """mangled name -> list of (address, opcode, operands, predicated)"""
    functions, current = {}, None
    for line in open(path, errors="replace"):
        m = re.search(r"Function : (\S+)", line)
        if m:
            current = functions.setdefault(m.group(1), [])
            continue
        if current is None:
            continue
        m = INSTRUCTION.match(line)
        if m:
            current.append((int(m.group(1), 16), m.group(3), m.group(4).strip(), m.group(2) is not None))
    return functions


def access_bytes(opcode):
    parts = opcode.split(".")
    for p in parts[1:]:
        if p == "128":
            return 16
        if p == "64":
            return 8
        if p in ("U8", "S8"):
            return 1
        if p in ("U16", "S16"):
            return 2
    return 4


def is_global_load(op):
    return op.startswith("LDG.") or op == "LDG" or op.startswith("LD.") or op == "LD"


def is_global_store(op):
    return op.startswith("STG.") or op == "STG" or op.startswith("ST.") or op == "ST" or op.startswith("RED.") or op.startswith("ATOMG")


def loops(code):
    """Backward branches: (first address, branch address) of each loop. A backward branch whose span
    holds an unconditional EXIT is out-of-line code (such as a divergent-shuffle fallback placed
    after the body) jumping back, not a loop."""
    exits = [addr for addr, op, _, predicated in code if op == "EXIT" and not predicated]
    found = []
    for addr, op, operands, _ in code:
        if op.split(".")[0] == "BRA":
            m = BRANCH_TARGET.search(operands)
            target = int(m.group(1), 16) if m else None
            if target is not None and target <= addr and not any(target <= e <= addr for e in exits):
                found.append((target, addr))
    return sorted(set(found))


def loop_stats(code, lo, hi):
    s = dict(instructions=0, loads=0, load_bytes=0, load_widths=set(), stores=0, store_bytes=0, local=0, calls=0, shared=0,
             mma=0, fma=0, math_op="", shared_loads=0, ldsm=0, async_copies=0, barriers=0)
    for addr, op, _, _ in code:
        if addr < lo or addr > hi or op == "NOP":
            continue
        s["instructions"] += 1
        if is_global_load(op):
            s["loads"] += 1
            s["load_bytes"] += access_bytes(op)
            s["load_widths"].add(access_bytes(op))
        elif is_global_store(op):
            s["stores"] += 1
            s["store_bytes"] += access_bytes(op)
        elif op.startswith("LDL") or op.startswith("STL"):
            s["local"] += 1
        elif op.startswith("LDS") or op.startswith("STS"):
            s["shared"] += 1
            s["shared_loads"] += op.startswith("LDS")
        elif op.startswith("CALL"):
            s["calls"] += 1
        base = op.split(".")[0]
        if base in TENSOR_MMA or base in FMA:
            s["mma" if base in TENSOR_MMA else "fma"] += 1
            s["math_op"] = s["math_op"] or op
        if base == "LDSM":
            s["ldsm"] += 1
        elif base in ("LDGSTS", "UBLKCP", "UTMALDG"):
            s["async_copies"] += 1
        elif base == "BAR":
            s["barriers"] += 1
    return s


TENSOR_MMA = {"HMMA", "IMMA", "DMMA", "HGMMA", "IGMMA", "QGMMA"}
FMA = {"FFMA", "DFMA", "HFMA2"}


def main_loop(code):
    """A matrix product's main loop: the innermost loop issuing tensor-core mma; failing that, the
    innermost loop with FMAs and shared-memory loads that issues the most FMAs (an epilogue's
    loops do math on registers and global memory, not on shared operands). Of loops with as many
    mma, the shortest: a main loop split into a loop over whole slabs of K and one over the last
    few steps is reported by the first, which runs all but those steps."""
    all_loops = [(lo, hi, loop_stats(code, lo, hi)) for lo, hi in loops(code)]
    for kind in ("mma", "fma"):
        inner = innermost([(lo, hi, s) for lo, hi, s in all_loops if s[kind] > 0 and (kind == "mma" or s["shared"] > 0)])
        if inner:
            lo, hi, s = max(inner, key=lambda x: (x[2][kind], -x[2]["instructions"]))
            s["math"] = s[kind]
            s["per_math"] = s["instructions"] / s["math"]
            s["range"] = (lo, hi)
            s["load_widths"] = sorted(s["load_widths"])
            return s
    return None


def innermost(found):
    """The loops of `found` (lo, hi, stats) that hold none of the others."""
    return [(lo, hi, s) for lo, hi, s in found if not any(lo <= a and b <= hi and (a, b) != (lo, hi) for a, b, _ in found)]


def hot_loop(code, element_bytes):
    """The innermost loop that loads from global memory (or, in a kernel that only stores, the
    innermost that stores), the one moving the most bytes per pass if several. Nested loops without
    such traffic, such as a loop over dimensions, count once each and are reported separately."""
    all_loops = [(lo, hi, loop_stats(code, lo, hi)) for lo, hi in loops(code)]
    for kind in ("load_bytes", "store_bytes"):
        inner = innermost([(lo, hi, s) for lo, hi, s in all_loops if s[kind] > 0])
        if inner:
            break
    if not inner:
        return None
    traffic = lambda x: x[2]["load_bytes"] + x[2]["store_bytes"]
    lo, hi, s = max(inner, key=lambda x: (traffic(x), x[2]["instructions"]))
    s["inner_loops"] = sum(1 for a, b, _ in all_loops if lo <= a and b <= hi and (a, b) != (lo, hi))
    # A kernel with a general and a fast loop moving as many bytes per pass (coordinates for any
    # layout, and a single stride) is reported by the larger; the smallest such sibling is noted.
    siblings = [x for x in inner if traffic(x) == traffic((lo, hi, s)) and x[2]["instructions"] < s["instructions"]]
    s["shortest_sibling"] = min(x[2]["instructions"] for x in siblings) if siblings else 0
    s["range"] = (lo, hi)
    per_pass = s["store_bytes"] if s["stores"] else s["load_bytes"]
    s["elements"] = max(per_pass / element_bytes, 1.0)
    s["per_element"] = s["instructions"] / s["elements"]
    s["per_byte"] = s["instructions"] / (s["load_bytes"] + s["store_bytes"])
    s["bytes_per_load"] = s["load_bytes"] / s["loads"] if s["loads"] else 0.0
    s["load_widths"] = sorted(s["load_widths"])
    return s


def template_of(demangled):
    m = re.match(r"void tessel::kernels::(\w+)<", demangled)
    return m.group(1) if m else None


def template_args(demangled):
    """The top-level template arguments of the kernel."""
    start = demangled.index("<") + 1
    depth, args, cur = 0, [], ""
    for ch in demangled[start:]:
        if ch == "<" or ch == "(":
            depth += 1
        elif ch == ">" or ch == ")":
            if depth == 0:
                args.append(cur.strip())
                break
            depth -= 1
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
            continue
        cur += ch
    return args


def element_type(demangled):
    """The kernel's element: its first template argument that is a scalar type, short of the last
    (a kernel's index type comes last), as rows_per_block<8, false, SoftmaxRow<float, ...>,
    __nv_bfloat16, unsigned>; else the first scalar type named anywhere among them, as
    reduce<..., SumReducer<__half>, TensorSource<__half, unsigned>, unsigned>."""
    sizes = dict(SCALARS)
    top = [a for a in template_args(demangled)[:-1] if a in sizes]
    if top:
        return top[0], sizes[top[0]]
    best = None
    for name, size in SCALARS:
        m = re.search(r"(?<![\w])" + re.escape(name) + r"(?![\w])", demangled[demangled.index("<"):])
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), name, size)
    return (best[1], best[2]) if best else ("?", 4)


def occupancy(registers, smem, threads):
    warps = (threads + 31) // 32
    per_warp = -(-registers * 32 // SM90["register_unit"]) * SM90["register_unit"] if registers else SM90["register_unit"]
    by_regs = (SM90["registers"] // per_warp) // warps
    by_warps = SM90["max_warps"] // warps
    block_smem = -(-(smem + SM90["smem_reserved_per_block"]) // SM90["smem_unit"]) * SM90["smem_unit"]
    by_smem = SM90["smem"] // block_smem
    blocks = min(by_regs, by_warps, by_smem, SM90["max_blocks"])
    return blocks, blocks * warps


BUDGET = re.compile(r"^\s*//\s*budget:\s*(.*)$")
KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\(")


def parse_budgets(directory):
    """kernel template name -> (budget dict, file:line). A kernel's budget is a '// budget:' line
    above its __global__ declaration, with only its template header, comments or blank lines between."""
    budgets, kernels_seen = {}, {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".cuh"):
            continue
        text = open(os.path.join(directory, name)).read()
        lines = text.split("\n")
        for k in KERNEL.finditer(text):
            number = text.count("\n", 0, k.start())  # 0-based line of __global__
            kernels_seen[k.group(1)] = f"{name}:{number + 1}"
            for above in range(number - 1, -1, -1):
                line = lines[above].strip()
                m = BUDGET.match(line)
                if m:
                    where = f"{name}:{above + 1}"
                    budgets[k.group(1)] = (parse_budget(m.group(1), where), where)
                    break
                if not (line.startswith("template") or line.startswith("//") or line == ""):
                    break
    return budgets, kernels_seen


def parse_budget(text, where):
    b = dict(threads=256, registers=None, hot=False, wide=False, mainloop=None)
    for item in [x.strip() for x in text.split(",") if x.strip()]:
        words = item.split()
        if words[0] in ("threads", "registers") and len(words) == 2 and words[1].isdigit():
            b[words[0]] = int(words[1])
        elif words == ["hot"]:
            b["hot"] = True
        elif words == ["wide"]:
            b["wide"] = True
        elif words[0] == "mainloop" and len(words) == 2 and re.fullmatch(r"\d+(\.\d+)?", words[1]):
            b["mainloop"] = float(words[1])
        else:
            sys.exit(f"{where}: cannot read budget item '{item}'")
    if b["registers"] is None:
        sys.exit(f"{where}: a budget names its register limit ('registers N')")
    return b


def vector_width(demangled):
    """The V of kernels whose first template argument is an element count per vector access."""
    args = template_args(demangled)
    return int(args[0]) if args and args[0].isdigit() else None


def analyse(args):
    ptxas = parse_ptxas(args.ptxas)
    sass = parse_sass(args.sass) if args.sass else {}
    names = demangle(sorted(ptxas))
    budgets, seen = parse_budgets(args.kernels)
    rows, problems = [], []
    for mangled, info in sorted(ptxas.items(), key=lambda kv: names[kv[0]]):
        d = names[mangled]
        t = template_of(d)
        if t is None:
            continue
        etype, esize = element_type(d)
        budget = budgets.get(t, (None, None))[0]
        threads = budget["threads"] if budget else 256
        blocks, warps = occupancy(info["registers"], info["smem"], threads)
        gemm = bool(budget and budget["mainloop"])
        finder = main_loop if gemm else (lambda code: hot_loop(code, esize))
        loop = finder(sass[mangled]) if mangled in sass else None
        row = dict(gemm=gemm, template=t, name=d, mangled=mangled, element=etype, threads=threads, blocks_per_sm=blocks, warps_per_sm=warps,
                   loop=loop, **info)
        rows.append(row)
        if budget is None:
            problems.append(f"{t}: no '// budget:' line above its __global__ declaration ({seen.get(t, 'kernels/')})")
            continue
        where = budgets[t][1]
        if info["registers"] > budget["registers"]:
            problems.append(f"{where}: {d} uses {info['registers']} registers, over its budget of {budget['registers']}")
        if budget["hot"] and (info["spill_stores"] or info["spill_loads"]):
            problems.append(f"{where}: {d} spills ({info['spill_stores']} bytes stored, {info['spill_loads']} loaded); hot kernels may not")
        if budget["hot"] and info["stack"]:
            problems.append(f"{where}: {d} has a {info['stack']}-byte stack frame; hot kernels may not")
        if gemm and sass and loop is None:
            problems.append(f"{where}: {d}: no main loop found (a loop issuing mma, or FMAs on shared operands)")
        elif gemm and loop and loop["per_math"] > budget["mainloop"]:
            problems.append(f"{where}: {d}'s main loop issues {loop['per_math']:.2f} instructions per {loop['math_op'].split('.')[0]} "
                            f"({loop['instructions']} for {loop['math']}), over its budget of {budget['mainloop']:g}")
        v = vector_width(d)
        if budget["wide"] and loop and (v is None or v > 1) and loop["load_widths"] and min(loop["load_widths"]) < 16:
            problems.append(f"{where}: {d}'s hot loop loads {loop['load_widths']} bytes at a time; its budget asks for 16")
    problems += [f"{t}: budget in kernels/ for a kernel the report never saw compiled" for t in budgets if t not in {r['template'] for r in rows}]
    return rows, budgets, problems


def variant(demangled):
    """A short name for an instantiation: its leading numeric template arguments, the reducer or row
    operation it applies, and whether it indexes with 64 bits."""
    args = template_args(demangled)
    ints = [a for a in args if re.fullmatch(r"-?\d+|true|false", a)]
    ops = re.findall(r"tessel::ops::(\w+(?:Reducer|Row))\b", demangled)
    source = re.findall(r"tessel::kernels::(TensorSource|ExpressionSource)\b", demangled)
    parts = [",".join(ints)] if ints else []
    parts += sorted(set(ops))[:1] + source[:1]
    if args and args[-1] == "unsigned long":
        parts.append("64-bit")
    return " ".join(parts) or "–"


def gemm_variant(demangled):
    """A matrix product's instantiation: its tile's template arguments and its boolean switches
    (B by columns for mma_matmul, 16-byte loads for simt_matmul)."""
    args = template_args(demangled)
    tile = next((re.sub(r"^.*?<|>$", "", a) for a in args if re.search(r"\w+Tile<", a)), "")
    tile = re.sub(r"^(float|double|__nv_bfloat16|__half), ", "", tile)  # SimtTile repeats the element
    flags = [a for a in args if a in ("true", "false")]
    return " ".join([tile.replace(" ", "")] + flags) or "–"


def gemm_types(demangled):
    """'in -> out' for a product whose second template argument is its output element."""
    args = template_args(demangled)
    scalars = [name for name, _ in SCALARS]
    if len(args) > 1 and args[1] in scalars and args[0] in scalars:
        return f"{args[0]} → {args[1]}"
    return args[0] if args else "?"


def fmt_loop(loop):
    if loop is None:
        return "| – | – | – | – | – | – |"
    widths = "/".join(str(w) for w in loop["load_widths"]) or "–"
    extra = []
    if loop["local"]:
        extra.append(f"{loop['local']} local")
    if loop["calls"]:
        extra.append(f"{loop['calls']} calls")
    if loop["inner_loops"]:
        extra.append(f"{loop['inner_loops']} inner loops, counted once")
    if loop.get("shortest_sibling"):
        sibling = loop["shortest_sibling"]
        extra.append(f"a loop of as many bytes: {sibling} ({sibling / loop['elements']:.1f} per element)")
    return (f"| {loop['instructions']} | {loop['elements']:g} | {loop['per_element']:.1f} | {loop['per_byte']:.2f} | {widths} | "
            f"{', '.join(extra) or '–'} |")


# The hot-loop table keeps to the element types the benchmarks measure and to 32-bit indexing (the
# copy kernels' 64-bit variants serve tensors of 2^31 elements and more; element-wise and reduction
# kernels have none: the host launches such tensors in pieces); the JSON has every instantiation.
REPORTED_ELEMENTS = {"float", "__nv_bfloat16", "unsigned char", "unsigned short", "unsigned int"}


def markdown(rows, budgets, problems, command):
    by_template = defaultdict(list)
    for r in rows:
        by_template[r["template"]].append(r)
    out = ["<!-- kernel-report:begin (written by scripts/kernel-report.sh; do not edit by hand) -->", "",
           f"Produced by `{command}`: nvcc for sm_90, `-Xptxas -v` and `cuobjdump -sass` of "
           f"tools/kernel-report/kernels.cu ({len(rows)} instantiations). Budget check: "
           + ("all within budget." if not problems else f"**{len(problems)} over budget** (listed below)."), "",
           "### Per kernel (worst instantiation)", "",
           "| kernel | inst. | registers | spill B | stack B | static smem B | threads | blocks/SM (warps) | budget |",
           "|---|---|---|---|---|---|---|---|---|"]
    for t in sorted(by_template):
        rs = by_template[t]
        regs = [r["registers"] for r in rs]
        worst_occ = min(rs, key=lambda r: r["warps_per_sm"])
        b = budgets.get(t, (None,))[0]
        btxt = "none" if b is None else (f"{b['registers']} regs" + (", hot" if b["hot"] else "") + (", wide" if b["wide"] else "")
                                         + (f", mainloop {b['mainloop']:g}" if b["mainloop"] else ""))
        out.append(f"| {t} | {len(rs)} | {min(regs)}–{max(regs)} | {max(r['spill_stores'] for r in rs)} | {max(r['stack'] for r in rs)} | "
                   f"{max(r['smem'] for r in rs)} | {worst_occ['threads']} | {worst_occ['blocks_per_sm']} ({worst_occ['warps_per_sm']}) | {btxt} |")
    out += ["", "### Hot loops (fp32 and bf16, the 1-, 2- and 4-byte copies, 32-bit indexing; per variant the instantiation with the most instructions per element)", "",
            "Loop instr.: SASS instructions in the innermost loop that loads from global memory (one pass of one "
            "thread; see above for how loops are found); elements: elements stored (or loaded, for reductions) per pass; per byte: instructions per "
            "global byte moved (an H200 issues about 7 per byte of its bandwidth per SM: above ~1, issue starts to compete "
            "with memory); load widths in bytes; local: LDL/STL (local-memory) instructions in the loop; calls: "
            "subroutine calls (such as 64-bit division); a loop of as many bytes: the smallest other innermost loop that moves as "
            "many bytes per pass (a kernel's fast loop beside its general one, which the row reports).", "",
            "| kernel | variant | element | registers | loop instr. | elements | instr./element | instr./byte | load B | notes |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for t in sorted(by_template):
        groups = defaultdict(list)
        for r in by_template[t]:
            if r["loop"] and not r["gemm"] and r["element"] in REPORTED_ELEMENTS and not variant(r["name"]).endswith("64-bit"):
                groups[(variant(r["name"]), r["element"])].append(r)
        for (v, e) in sorted(groups):
            r = max(groups[(v, e)], key=lambda r: r["loop"]["per_element"])
            out.append(f"| {t} | {v} | {e} | {r['registers']} " + fmt_loop(r["loop"]))
    gemms = sorted((r for r in rows if r["gemm"] and r["loop"]), key=lambda r: (r["template"], gemm_types(r["name"]), gemm_variant(r["name"])))
    if gemms:
        out += ["", "### Matrix products: main loops (every instantiation)", "",
                "The innermost loop issuing tensor-core mma (or, for the SIMT kernels, FMAs on shared operands), one "
                "pass of one thread: its instructions, the math instructions among them, instructions per math "
                "instruction (the budget's `mainloop`), shared-memory loads (of them ldmatrix), global-to-shared "
                "copies (cp.async), global loads, barriers.", "",
                "| kernel | types | tile, switches | registers | loop instr. | math | instr./math | shared loads (ldmatrix) | cp.async | global loads | barriers |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in gemms:
            L = r["loop"]
            out.append(f"| {r['template']} | {gemm_types(r['name'])} | {gemm_variant(r['name'])} | {r['registers']} | {L['instructions']} | "
                       f"{L['math']} {L['math_op'].split('.')[0]} | {L['per_math']:.2f} | {L['shared_loads']} ({L['ldsm']}) | {L['async_copies']} | "
                       f"{L['loads']} | {L['barriers']} |")
    if problems:
        out += ["", "### Over budget", ""] + [f"- {p}" for p in problems]
    out += ["", "<!-- kernel-report:end -->"]
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["check", "markdown"])
    p.add_argument("--ptxas", required=True)
    p.add_argument("--sass")
    p.add_argument("--kernels", required=True)
    p.add_argument("--out")
    p.add_argument("--json")
    p.add_argument("--command", default="scripts/kernel-report.sh")
    args = p.parse_args()
    rows, budgets, problems = analyse(args)
    if not rows:
        sys.exit("kernel report: no tessel kernel in the ptxas log")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{k: v for k, v in r.items() if k != "mangled"} for r in rows], f, indent=1, default=list)
    if args.mode == "markdown":
        text = markdown(rows, budgets, problems, args.command)
        if args.out and os.path.exists(args.out):
            old = open(args.out).read()
            b, e = old.find("<!-- kernel-report:begin"), old.find("<!-- kernel-report:end -->")
            if b >= 0 and e >= 0:
                text = old[:b] + text.rstrip("\n") + old[e + len("<!-- kernel-report:end -->"):]
        if args.out:
            open(args.out, "w").write(text)
        else:
            sys.stdout.write(text)
    templates = {r["template"] for r in rows}
    print(f"kernel report: {len(rows)} instantiations of {len(templates)} kernels; {len(problems)} over budget")
    for x in problems:
        print("  " + x)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
