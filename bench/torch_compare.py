#!/usr/bin/env python3
"""PyTorch on the problems tessel-bench times on a GPU, written as Google Benchmark JSON so that
bench/report.py puts a "% of torch" column beside "% of vendor".

    python3 bench/torch_compare.py --out torch.json [--no-compile] [--budget SECONDS]
    python3 bench/torch_compare.py --out /tmp/t.json --cpu-dry-run 16    # no GPU: see below

Each problem has tessel-bench's GPU size and dtype, and its name is tessel-bench's with the
implementation component set to `torch` (PyTorch eager) or `torch_compile` (torch.compile of the
same function, where it compiles on this machine): BM_softmax/1024/manual_time pairs with
BM_softmax/torch/1024/manual_time. Timing follows docs/benchmarking.md: CUDA events around each
call, the L2 cache flushed (a 256 MiB write) before each, 3 warm-up calls, the median of 20.
Inputs are random normal values, never zeros; each result is checked against a float64 reference
on a sample (the relative error is reported, as tessel-bench's rel_error).

--cpu-dry-run K runs every problem on the CPU with each dimension divided by K (lengths by K*K),
timed by the host clock: no figure to keep (its JSON says so), but every PyTorch call, reference
and error check of the GPU run is made once with a real PyTorch before the GPU's few minutes are
spent on it (docs/device-check.md).
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

MiB = 1 << 20


def timed(fn, flush, reps=20, warmup=3):
    """Median microseconds of fn() with CUDA events, the L2 flushed before each call (on the CPU
    dry run, flush is None: three calls by the host clock)."""
    if flush is None:
        fn()
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(times)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def rel_error(got, want):
    got, want = got.double().flatten(), want.double().flatten()
    return float((got - want).norm() / want.norm().clamp_min(1e-300))


def problems(dev="cuda", shrink=1):
    """(tessel-bench name with {impl}, bytes moved, make inputs, function, float64 reference);
    on the CPU dry run each dimension is divided by shrink, each length by its square."""
    g = torch.Generator(device=dev).manual_seed(1)

    def dim(x):
        return max(1, x // shrink)

    def length(x):
        return max(1, x // (shrink * shrink))

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=dev, dtype=torch.float32, generator=g).to(dtype)

    out = []
    n = length(1 << 26)
    for tag, dt, size in (("f32", torch.float32, 4), ("bf16", torch.bfloat16, 2)):
        out.append((f"BM_fma/{{impl}}/{tag}/manual_time", 4.0 * n * size,
                    lambda dt=dt: (randn(n, dtype=dt), randn(n, dtype=dt), randn(n, dtype=dt)),
                    lambda a, b, c: torch.addcmul(c, a, b), lambda a, b, c: a.double() * b.double() + c.double()))
    out.append(("BM_cast_f32_bf16/{impl}/manual_time", 6.0 * n, lambda: (randn(n),), lambda x: x.to(torch.bfloat16),
                lambda x: x.double()))
    out.append(("BM_to_bf16/{impl}/f32/manual_time", 6.0 * n, lambda: (randn(n),), lambda x: x.to(torch.bfloat16),
                lambda x: x.double()))
    s = length(1 << 28)
    out.append(("BM_sum/{impl}/f32/manual_time", 4.0 * s, lambda: (randn(s),), lambda x: x.sum(), lambda x: x.double().sum()))
    r = c = dim(16384)
    out.append(("BM_row_sum/{impl}/f32/manual_time", 4.0 * r * c, lambda: (randn(r, c),), lambda x: x.sum(1),
                lambda x: x.double().sum(1)))
    out.append(("BM_col_sum/{impl}/f32/manual_time", 4.0 * r * c, lambda: (randn(r, c),), lambda x: x.sum(0),
                lambda x: x.double().sum(0)))
    d = length(1 << 27)
    out.append(("BM_dot/{impl}/f32/manual_time", 8.0 * d, lambda: (randn(d), randn(d)), lambda a, b: torch.dot(a, b),
                lambda a, b: (a.double() * b.double()).sum()))
    t = dim(16384)
    out.append(("BM_transpose/{impl}/f32/manual_time", 8.0 * t * t, lambda: (randn(t, t),), lambda x: x.t().contiguous(),
                lambda x: x.double().t()))
    bp = (dim(64), dim(1024), dim(1024))
    out.append(("BM_batched_permute/{impl}/manual_time", 8.0 * bp[0] * bp[1] * bp[2], lambda: (randn(*bp),),
                lambda x: x.permute(0, 2, 1).contiguous(), lambda x: x.double().permute(0, 2, 1)))
    total = length(1 << 26)
    for named in (1024, 4096, 32768, 262144):
        cols = dim(named)
        rows = max(1, total // cols)
        shape = (rows, cols)
        out.append((f"BM_softmax/{{impl}}/{named}/manual_time", 8.0 * rows * cols, lambda shape=shape: (randn(*shape) * 4,),
                    lambda x: torch.softmax(x, -1), lambda x: torch.softmax(x.double(), -1)))
        out.append((f"BM_log_softmax/{{impl}}/{named}/manual_time", 8.0 * rows * cols, lambda shape=shape: (randn(*shape) * 4,),
                    lambda x: torch.log_softmax(x, -1), lambda x: torch.log_softmax(x.double(), -1)))
        w = torch.full((cols,), 1.5, device=dev)
        b = torch.full((cols,), 0.25, device=dev)
        out.append((f"BM_rms_norm/{{impl}}/{named}/manual_time", 8.0 * rows * cols, lambda shape=shape: (randn(*shape) * 4,),
                    lambda x, w=w, cols=cols: F.rms_norm(x, (cols,), w, 1e-6),
                    lambda x, w=w, cols=cols: F.rms_norm(x.double(), (cols,), w.double(), 1e-6)))
        out.append((f"BM_layer_norm/{{impl}}/{named}/manual_time", 8.0 * rows * cols, lambda shape=shape: (randn(*shape) * 4,),
                    lambda x, w=w, b=b, cols=cols: F.layer_norm(x, (cols,), w, b, 1e-5),
                    lambda x, w=w, b=b, cols=cols: F.layer_norm(x.double(), (cols,), w.double(), b.double(), 1e-5)))
    for named in (1024, 32768, 777, 50257):  # bf16 rows: the warp path (1024) and a block or cluster path; 777, 50257: odd rows
        cols = dim(named)
        rows = max(1, total // cols)
        shape = (rows, cols)
        bf16 = torch.bfloat16
        w = torch.full((cols,), 1.5, device=dev, dtype=bf16)
        b = torch.full((cols,), 0.25, device=dev, dtype=bf16)
        out.append((f"BM_softmax_bf16/{{impl}}/{named}/manual_time", 4.0 * rows * cols,
                    lambda shape=shape: (randn(*shape, dtype=bf16) * 4,),
                    lambda x: torch.softmax(x, -1), lambda x: torch.softmax(x.double(), -1)))
        if named in (777, 50257):
            continue  # softmax only, as tessel-bench
        out.append((f"BM_layer_norm_bf16/{{impl}}/{named}/manual_time", 4.0 * rows * cols,
                    lambda shape=shape: (randn(*shape, dtype=bf16) * 4,),
                    lambda x, w=w, b=b, cols=cols: F.layer_norm(x, (cols,), w, b, 1e-5),
                    lambda x, w=w, b=b, cols=cols: F.layer_norm(x.double(), (cols,), w.double(), b.double(), 1e-5)))
    # Matrix products (bytes: the three matrices once; the report pairs by name and time).
    for tag, dt, size in (("bf16", torch.bfloat16, 2), ("f32", torch.float32, 4)):
        mm = dim(4096)
        out.append((f"BM_matmul/{{impl}}/{tag}/4096/manual_time", 3.0 * size * mm * mm,
                    lambda dt=dt, mm=mm: (randn(mm, mm, dtype=dt), randn(mm, mm, dtype=dt)),
                    lambda a, b: torch.matmul(a, b), lambda a, b: a.double() @ b.double()))
    mm = dim(4096)

    def tf32_matmul(a, b):
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return torch.matmul(a, b)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old

    def ints(*shape):
        return torch.randint(-100, 100, shape, device=dev, dtype=torch.int8, generator=g)

    # tf32, int8 (torch._int_mm, b a weight transposed as tessel-bench's) and fp8 e4m3 with unit
    # per-tensor scales into bf16 (torch._scaled_mm, sm_89+), as tessel-bench's BM_matmul rows.
    out.append((f"BM_matmul/{{impl}}/tf32/4096/manual_time", 12.0 * mm * mm, lambda: (randn(mm, mm), randn(mm, mm).t()),
                tf32_matmul, lambda a, b: a.double() @ b.double()))
    out.append((f"BM_matmul/{{impl}}/int8/4096/manual_time", 6.0 * mm * mm, lambda: (ints(mm, mm), ints(mm, mm).t()),
                lambda a, b: torch._int_mm(a, b), lambda a, b: a.double() @ b.double()))
    if dev == "cpu" or torch.cuda.get_device_capability() >= (8, 9):
        one = torch.ones((), device=dev)
        out.append((f"BM_matmul/{{impl}}/e4m3/4096/manual_time", 4.0 * mm * mm,
                    lambda: (randn(mm, mm).mul(4).to(torch.float8_e4m3fn), randn(mm, mm).mul(4).to(torch.float8_e4m3fn).t()),
                    lambda a, b: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16), lambda a, b: a.double() @ b.double()))
    # The LLM shapes in bf16 (tessel-bench's BM_matmul_llm).
    for gm, gn, gk in ((4096, 4096, 14336), (8192, 1024, 8192), (16, 4096, 4096)):
        m, n_, k = dim(gm), dim(gn), dim(gk)
        out.append((f"BM_matmul_llm/{{impl}}/bf16/{gm}x{gn}x{gk}/manual_time", 2.0 * (m * k + k * n_ + m * n_),
                    lambda m=m, n_=n_, k=k: (randn(m, k, dtype=torch.bfloat16), randn(k, n_, dtype=torch.bfloat16)),
                    lambda a, b: torch.matmul(a, b), lambda a, b: a.double() @ b.double()))
    # gelu(x @ W^T + b) in bf16, tessel-bench's BM_linear_bias_gelu (PyTorch: linear, then gelu).
    lin = dim(4096)
    out.append(("BM_linear_bias_gelu/{impl}/bf16/manual_time", 2.0 * 3 * lin * lin,
                lambda: (randn(lin, lin, dtype=torch.bfloat16), randn(lin, lin, dtype=torch.bfloat16), randn(lin, dtype=torch.bfloat16)),
                lambda x, w, b: F.gelu(F.linear(x, w, b)), lambda x, w, b: F.gelu(F.linear(x.double(), w.double(), b.double()))))
    # Rows sorted with their positions (torch.sort returns both, as tessel::sort does).
    so = dim(4096)
    out.append(("BM_sort/{impl}/f32/manual_time", 16.0 * so * so, lambda: (randn(so, so) * 1000,),
                lambda x: torch.sort(x, dim=1, stable=True)[0], lambda x: x.double().sort(dim=1)[0]))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--no-compile", action="store_true", help="PyTorch eager only")
    p.add_argument("--budget", type=float, default=150, help="seconds; problems past it are skipped")
    p.add_argument("--cpu-dry-run", type=int, metavar="K", default=0,
                   help="run every problem once on the CPU, each dimension divided by K: a check of the script, not figures")
    a = p.parse_args()
    dry = a.cpu_dry_run > 0
    if not dry and not torch.cuda.is_available():
        print("torch_compare: no CUDA device; nothing to compare")
        return 0
    t_start = time.time()
    if dry:
        dev, flush = "cpu", None
        ctx = {"device": "cpu", "backend": "torch", "date": datetime.date.today().isoformat(),
               "figures": f"none: a CPU dry run of the script (dimensions / {a.cpu_dry_run}), PyTorch {torch.__version__}"}
    else:
        dev = "cuda"
        props = torch.cuda.get_device_properties(0)
        flush = torch.empty(256 * MiB // 4, device="cuda", dtype=torch.float32)
        ctx = {"device": props.name, "backend": "torch", "figures": "GPU figures, CUDA event timing, PyTorch " + torch.__version__,
               "date": datetime.date.today().isoformat(), "compute_capability": f"{props.major}.{props.minor}",
               "sm_count": props.multi_processor_count, "memory_gib": round(props.total_memory / 2**30, 1),
               "runtime_driver": f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}"}
    rows, failed = [], []

    def save():
        # After every timing, atomically: the check's `timeout` may end this script inside a
        # torch.compile, and the timings taken by then must survive it.
        with open(a.out + ".tmp", "w") as fh:
            json.dump({"context": ctx, "benchmarks": rows}, fh, indent=1)
        os.replace(a.out + ".tmp", a.out)

    save()
    # Eager first for every problem, then torch.compile as far as the budget goes (its compiles
    # take seconds each): the eager column is the one the goals are stated against.
    passes = [("torch", lambda fn: fn, "PyTorch eager")]
    if not a.no_compile:
        passes.append(("torch_compile", lambda fn: torch.compile(fn, dynamic=False), "torch.compile"))
    for impl, wrap, label in passes:
        for name, nbytes, make, fn, ref in problems(dev, max(1, a.cpu_dry_run)):
            if not dry and time.time() - t_start > a.budget:  # the dry run checks everything
                print(f"torch_compare: out of budget, skipping {name.format(impl=impl)}")
                continue
            inputs = want = None
            try:
                inputs = make()
                want = ref(*inputs)
                f = wrap(fn)
                got = f(*inputs)
                err = rel_error(got, want)
                # Every output is within a few roundings of its float64 reference (bf16's 2^-8 the
                # coarsest, e4m3 products of rounded inputs included): beyond 0.1 the reference or
                # the call is wrong, which is what the dry run is for.
                if dry and not err <= 0.1:
                    raise ValueError(f"relative error {err:.2e} against the float64 reference")
                us = timed(lambda: f(*inputs), flush)
            except Exception as e:  # torch.compile may not work offline, an op may be missing: the rest still runs
                print(f"torch_compare: {name.format(impl=impl)} failed: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}")
                failed.append(name.format(impl=impl))
                continue
            finally:
                del inputs, want
                if not dry:
                    torch.cuda.empty_cache()
            rows.append({"name": name.format(impl=impl), "run_name": name.format(impl=impl), "run_type": "iteration",
                         "real_time": us, "time_unit": "us", "bytes_per_second": nbytes / (us * 1e-6),
                         "rel_error": err, "label": label})
            save()
            print(f"{name.format(impl=impl):45s} {us:10.1f} us {nbytes / (us * 1e3):8.1f} GB/s  rel.err {err:.1e}", flush=True)
    print(f"torch_compare: {len(rows)} timings in {time.time() - t_start:.0f} s -> {a.out}")
    # On a GPU a problem that fails is reported and the rest kept; the dry run exists to find them.
    if dry and failed:
        print(f"torch_compare: the dry run failed {len(failed)} problems: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
