#!/usr/bin/env python3
"""The kernel report's own test: on a constructed ptxas log, SASS listing and kernels folder, the
budget check passes within budget and fails, naming the kernel, when each kind of budget is broken
(registers, a spill or a stack frame in a hot kernel, narrow loads under 'wide', a main loop over
'mainloop', a kernel without a budget); the loop finder counts a grid-stride loop and skips
out-of-line code that jumps back, and notes a fast loop beside a general one; a matrix product's main loop is its mma loop, not its epilogue's; a kernel's element is its element
argument, not a type inside its operation's."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, "report.py")
# void tessel::kernels::copy4<4, float>(float*) and void tessel::kernels::other<float>(float*)
COPY = "_ZN6tessel7kernels5copy4ILi4EfEEvPT0_"
OTHER = "_ZN6tessel7kernels5otherIfEEvPT_"


def ptxas(registers, stack=0, spill=0):
    return (f"ptxas info    : Compiling entry function '{COPY}' for 'sm_90'\n"
            f"ptxas info    : Function properties for {COPY}\n"
            f"    {stack} bytes stack frame, {spill} bytes spill stores, {spill} bytes spill loads\n"
            f"ptxas info    : Used {registers} registers, used 0 barriers, 128 bytes smem\n")


def sass(load):
    lines = [f"\t\tFunction : {COPY}",
             "        /*0000*/                   S2R R0, SR_TID.X ;",
             f"        /*0010*/                   {load} R4, desc[UR4][R2.64] ;",
             "        /*0020*/                   FMUL R4, R4, 2 ;",
             "        /*0030*/                   STG.E.128 desc[UR4][R2.64], R4 ;",
             "        /*0040*/               @P0 BRA 0x10 ;",
             "        /*0050*/                   EXIT ;",
             "        /*0060*/                   SHFL.DOWN R5, R4, 0x1, 0x1f ;",  # out of line, jumps back
             "        /*0070*/                   BRA 0x20 ;"]
    return "\n".join(lines) + "\n"


def run(budget_line, log, listing, extra_kernel=False):
    with tempfile.TemporaryDirectory() as d:
        kernels = os.path.join(d, "kernels")
        os.mkdir(kernels)
        source = f"// copies\n{budget_line}\ntemplate <int V, class T>\n__global__ void copy4(T* p) {{}}\n"
        if extra_kernel:
            source += "template <class T>\n__global__ void other(T* p) {}\n"
            log += log.replace(COPY, OTHER)
        open(os.path.join(kernels, "k.cuh"), "w").write(source)
        open(os.path.join(d, "ptxas.log"), "w").write(log)
        open(os.path.join(d, "sass.txt"), "w").write(listing)
        r = subprocess.run([sys.executable, REPORT, "markdown", "--ptxas", os.path.join(d, "ptxas.log"), "--sass",
                            os.path.join(d, "sass.txt"), "--kernels", kernels, "--out", os.path.join(d, "k.md")],
                           capture_output=True, text=True)
        md = open(os.path.join(d, "k.md")).read() if os.path.exists(os.path.join(d, "k.md")) else ""
        return r.returncode, r.stdout + r.stderr, md


def gemm_sass():
    """A product: a main loop (0x10..0x60: 6 instructions, 2 HMMA, an ldmatrix, a cp.async, a
    barrier) and a larger epilogue loop after it (0x80..0xc0, FFMAs on global values)."""
    lines = [f"\t\tFunction : {COPY}",
             "        /*0000*/                   S2R R0, SR_TID.X ;",
             "        /*0010*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;",
             "        /*0020*/                   LDGSTS.E.BYPASS.128.ZFILL [R1], desc[UR4][R2.64], P0 ;",
             "        /*0030*/                   LDSM.16.M88.4 R4, [R1+UR4] ;",
             "        /*0040*/                   HMMA.16816.F32.BF16 R8, R4, R6, R8 ;",
             "        /*0050*/                   HMMA.16816.F32.BF16 R12, R4, R7, R12 ;",
             "        /*0060*/               @P1 BRA 0x10 ;",
             "        /*0070*/                   NOP ;",
             "        /*0080*/                   LDG.E R4, desc[UR4][R2.64] ;",
             "        /*0090*/                   FFMA R5, R4, R8, R9 ;",
             "        /*00a0*/                   FFMA R5, R5, R8, R9 ;",
             "        /*00b0*/                   STG.E desc[UR4][R2.64], R5 ;",
             "        /*00c0*/               @P2 BRA 0x80 ;",
             "        /*00d0*/                   EXIT ;"]
    return "\n".join(lines) + "\n"


def two_path_sass():
    """A general loop (0x10..0x50: 5 instructions) and a fast one (0x70..0x90: 3), each one 16-byte
    load and store per pass: the row reports the general loop and notes the fast one."""
    lines = [f"\t\tFunction : {COPY}",
             "        /*0000*/                   S2R R0, SR_TID.X ;",
             "        /*0010*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;",
             "        /*0020*/                   IMAD.HI.U32 R9, R0, R8, RZ ;",
             "        /*0030*/                   IMAD R9, R9, R8, R0 ;",
             "        /*0040*/                   STG.E.128 desc[UR4][R2.64], R4 ;",
             "        /*0050*/               @P0 BRA 0x10 ;",
             "        /*0060*/                   EXIT ;",
             "        /*0070*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;",
             "        /*0080*/                   STG.E.128 desc[UR4][R2.64], R4 ;",
             "        /*0090*/               @P1 BRA 0x70 ;",
             "        /*00a0*/                   EXIT ;"]
    return "\n".join(lines) + "\n"


failures = []


def expect(what, got_rc, want_rc, output, needle=None):
    if got_rc != want_rc or (needle and needle not in output):
        failures.append(f"{what}: exit {got_rc} (want {want_rc}), output:\n{output}")


wide = "LDG.E.128.CONSTANT"
rc, out, md = run("// budget: threads 128, registers 32, hot, wide", ptxas(30), sass(wide))
expect("within budget", rc, 0, out)
# The loop is 0x10..0x40: 4 instructions, one 16-byte load, one 16-byte store of 4 floats.
if "| copy4 | 4 | float | 30 | 4 | 4 | 1.0 | 0.12 | 16 | – |" not in md:
    failures.append("hot-loop row not as computed by hand:\n" + md)
if "| copy4 | 1 | 30–30 | 0 | 0 | 128 | 128 | 16 (64) |" not in md:
    failures.append("occupancy row (30 registers, 128 threads: 16 blocks, 64 warps) not as computed by hand:\n" + md)
rc, out, md = run("// budget: threads 128, registers 32, hot, wide", ptxas(30), two_path_sass())
if "| copy4 | 4 | float | 30 | 5 | 4 | 1.2 | 0.16 | 16 | a loop of as many bytes: 3 (0.8 per element) |" not in md:
    failures.append("a general and a fast loop (5 and 3 instructions): the general one's row noting the fast one, expected:\n" + md)
rc, out, _ = run("// budget: threads 128, registers 32, hot", ptxas(40), sass(wide))
expect("registers over budget", rc, 1, out, "uses 40 registers, over its budget of 32")
rc, out, _ = run("// budget: threads 128, registers 64, hot", ptxas(40, stack=16), sass(wide))
expect("stack frame in a hot kernel", rc, 1, out, "16-byte stack frame")
rc, out, _ = run("// budget: threads 128, registers 64, hot", ptxas(40, spill=8), sass(wide))
expect("spill in a hot kernel", rc, 1, out, "spills (8 bytes stored")
rc, out, _ = run("// budget: threads 128, registers 64", ptxas(40, stack=16, spill=8), sass(wide))
expect("stack and spill allowed when not hot", rc, 0, out)
rc, out, _ = run("// budget: threads 128, registers 64, wide", ptxas(40), sass("LDG.E.CONSTANT"))
expect("narrow loads under 'wide'", rc, 1, out, "loads [4] bytes at a time")
rc, out, _ = run("// budget: threads 128, registers 64", ptxas(40), sass(wide), extra_kernel=True)
expect("a kernel without a budget", rc, 1, out, "other: no '// budget:' line")
rc, out, md = run("// budget: threads 128, registers 64, mainloop 3", ptxas(40), gemm_sass())
expect("main loop within 'mainloop'", rc, 0, out)
if "| copy4 | 4 | – | 40 | 6 | 2 HMMA | 3.00 | 1 (1) | 1 | 0 | 1 |" not in md:
    failures.append("main-loop row (6 instructions, 2 HMMA, 1 ldmatrix, 1 cp.async, 1 barrier) not as computed by hand:\n" + md)
rc, out, _ = run("// budget: threads 128, registers 64, mainloop 2.5", ptxas(40), gemm_sass())
expect("main loop over 'mainloop'", rc, 1, out, "main loop issues 3.00 instructions per HMMA (6 for 2), over its budget of 2.5")
rc, out, _ = run("// budget: threads 128, regs 64", ptxas(40), sass(wide))
expect("an unreadable budget", rc, 1, out, "cannot read budget item 'regs 64'")

sys.path.insert(0, HERE)
import report  # noqa: E402
for name, want in [("void k::rows<8, false, k::SoftmaxRow<float, false, true>, __nv_bfloat16, unsigned int>(int)", "__nv_bfloat16"),
                   ("void k::reduce<256, 4, k::SumReducer<__half>, k::TensorSource<__half, unsigned int>, unsigned int>(int)", "__half"),
                   ("void k::convert<signed char, float, 4>(int)", "signed char")]:
    if report.element_type(name)[0] != want:
        failures.append(f"element of {name}: {report.element_type(name)[0]}, expected {want}")

if failures:
    print("\n\n".join(failures))
    sys.exit(1)
print("kernel report self-test: budgets within and over (registers, hot spill and stack, wide, mainloop, missing, unreadable), loops (a fast one beside a general one), main loops, occupancy and element types: all as expected")
