#!/usr/bin/env python3
"""Turns Google Benchmark JSON from tessel's benchmarks into a Markdown report and PNG charts.

    python3 bench/report.py RUN.json [MORE.json ...] --markdown OUT.md --images DIR

For each run: the device header and the ceilings measured in that run, then one table per benchmark
family (the part of the name before '/' with the BM_ prefix dropped) with time, GB/s, GFLOP/s, the
percentage of the run's ceiling, the percentage of the vendor library's speed and the relative error
against the reference. Charts: achieved GB/s of every bandwidth-reporting benchmark against the
measured ceilings, a roofline, GFLOP/s of the compute benchmarks, and bars of tessel's speed as a
percentage of cuBLAS / cuDNN / CUB / Thrust for every benchmark measured both ways. A benchmark with a
CPU row of the same problem (`BM_matmul/openblas/f32/1024`) gets its speed-up over the CPU in the note.

Vendor pairs are found by name: a benchmark whose second name component is an implementation
(`BM_sum/tessel/268435456` and `BM_sum/cub/268435456`) is compared with the rows that differ only in
that component; % of vendor = vendor time / tessel time. Runs written by bench/torch_compare.py
(context backend "torch") pair the same way with the tessel run of the same device: % of torch =
PyTorch's time / tessel's time, for eager and for torch.compile.

When OUT.md exists and holds the lines `<!-- report:begin -->` and `<!-- report:end -->`, only the
text between them is replaced, so hand-written prose around the generated tables stays.
Needs matplotlib (Debian python3-matplotlib).
"""
import argparse
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        run = json.load(f)
    rows = [b for b in run.get("benchmarks", []) if b.get("run_type", "iteration") in ("iteration", "aggregate")]
    # With repetitions, keep the medians only.
    if any(b.get("aggregate_name") == "median" for b in rows):
        rows = [b for b in rows if b.get("aggregate_name") == "median"]
    return run.get("context", {}), rows


def name_of(b):
    """The benchmark's name without the aggregate suffix (`_median`) that repetitions add."""
    return b.get("run_name") or b["name"]


def family(name):
    return re.sub(r"^BM_", "", name.split("/")[0]).split("<")[0]


VENDORS = ("cublas", "cublaslt", "cudnn", "cub", "thrust")
TORCH = ("torch", "torch_compile")  # bench/torch_compare.py's runs (context backend "torch")
CPU = ("openblas",)  # the same problem on the host's cores (BM_matmul/openblas/...)
IMPLS = ("tessel",) + VENDORS + TORCH + CPU
BEGIN, END = "<!-- report:begin -->", "<!-- report:end -->"


def impl_key(name):
    """(implementation, the name without it) for names like BM_sum/cub/1024; (None, name) otherwise."""
    parts = name.split("/")
    if len(parts) > 1 and parts[1].lower() in IMPLS:
        return parts[1].lower(), "/".join(parts[:1] + parts[2:])
    return None, name


def by_problem(rows):
    """{the name without its implementation component: {implementation: row}}."""
    by_key = {}
    for b in rows:
        impl, key = impl_key(name_of(b))
        if impl:
            by_key.setdefault(key, {})[impl] = b
    return by_key


def vendor_ratios(rows):
    """{tessel benchmark name: (vendor, percent of the vendor's speed)} for every benchmark measured both ways."""
    out = {}
    for impls in by_problem(rows).values():
        ours = impls.get("tessel")
        for vendor in VENDORS:
            theirs = impls.get(vendor)
            if ours and theirs and ours.get("real_time") and theirs.get("real_time"):
                out[name_of(ours)] = (vendor, 100.0 * seconds(theirs) / seconds(ours))
                break
    return out


def cpu_speedups(rows):
    """{GPU benchmark name: "152x openblas (CPU)"}: the CPU row's time over the GPU row's, for every
    implementation measured beside a CPU row of the same problem."""
    out = {}
    for impls in by_problem(rows).values():
        cpu = next(((c, impls[c]) for c in CPU if c in impls and impls[c].get("real_time")), None)
        if not cpu:
            continue
        for impl, b in impls.items():
            if impl not in CPU and b.get("real_time"):
                out[name_of(b)] = f"{seconds(cpu[1]) / seconds(b):.3g}x {cpu[0]} (CPU)"
    return out


def torch_ratios(rows, runs, ctx):
    """{tessel benchmark name: "152 (eager), 98 (compile)"}: PyTorch's time over tessel's, in percent,
    from the torch runs (bench/torch_compare.py) of the same device."""
    theirs = {}
    for tctx, trows in runs.values():
        if tctx.get("backend") == "torch" and tctx.get("device") == ctx.get("device"):
            for b in trows:
                impl, key = impl_key(name_of(b))
                if impl in TORCH and b.get("real_time"):
                    theirs.setdefault(key, {})[impl] = b
    out = {}
    for b in rows:
        impl, key = impl_key(name_of(b))
        if impl not in (None, "tessel") or key not in theirs or not b.get("real_time"):
            continue
        # PyTorch's rows are medians of 20 calls: set against the median of tessel's samples where
        # the run reported it (counter median_s), not Google Benchmark's mean.
        ours = b["median_s"] if b.get("median_s") else seconds(b)
        parts = [f"{100.0 * seconds(t) / ours:.3g} ({'eager' if i == 'torch' else 'compile'})"
                 for i, t in sorted(theirs[key].items())]
        out[name_of(b)] = ", ".join(parts)
    return out


def seconds(b):
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
    return b["real_time"] * scale


def fmt_time(b):
    if b.get("error_occurred"):  # Google Benchmark writes no time or counters for it
        return "failed"
    unit = b.get("time_unit", "ns")
    return f"{b.get('real_time', 0):.4g} {unit}"


def fmt(v, digits=4):
    return "" if v is None else f"{v:.{digits}g}"


def gbs(b):
    v = b.get("GB/s")
    if v is None and "bytes_per_second" in b:
        v = b["bytes_per_second"] / 1e9
    return v


def current_runs(runs):
    """The newest run of each device is current; older runs of the same device are superseded."""
    newest = {}
    for path, (ctx, _) in runs.items():
        key = (ctx.get("device"), ctx.get("backend"))
        if key not in newest or ctx.get("date", "") > runs[newest[key]][0].get("date", ""):
            newest[key] = path
    return set(newest.values())


def write_markdown(runs, out, images, names):
    lines = ["# Benchmark report", "",
             "Generated by `bench/report.py` from Google Benchmark JSON; medians where the run had repetitions.", ""]
    current = current_runs(runs)
    for path, (ctx, rows) in runs.items():
        status = "current" if path in current else "superseded by a newer run on the same device"
        lines += [f"## {names[path]}{os.path.splitext(path)[1]} ({status})", ""]
        figures = ctx.get("figures", "")
        lines += [f"- device: {ctx.get('device', '?')} ({ctx.get('backend', '?')}; {figures})",
                  f"- compute capability {ctx.get('compute_capability', '?')}, {ctx.get('sm_count', '?')} SMs, "
                  f"{ctx.get('memory_gib', '?')} GiB, runtime/driver {ctx.get('runtime_driver', '?')}, date {ctx.get('date', '?')}",
                  f"- ceilings measured in this run: device copy {ctx.get('ceiling_d2d_copy_gbs', '?')} GB/s, "
                  f"pinned H2D {ctx.get('ceiling_h2d_pinned_gbs', '?')} GB/s, pinned D2H {ctx.get('ceiling_d2h_pinned_gbs', '?')} GB/s, "
                  f"cuBLAS SGEMM {ctx.get('ceiling_sgemm_tflops', 'n/a')} TFLOP/s, bf16 GEMM {ctx.get('ceiling_bf16_gemm_tflops', 'n/a')} TFLOP/s",
                  f"- clocks at start: {ctx.get('clocks_at_start', 'unknown (no NVML)')}",
                  ""]
        ratios = vendor_ratios(rows)
        speedups = cpu_speedups(rows)
        versus_torch = torch_ratios(rows, runs, ctx) if ctx.get("backend") != "torch" else {}
        by_family = {}
        for b in rows:
            by_family.setdefault(family(name_of(b)), []).append(b)
        for fam, bs in by_family.items():
            lines += [f"### {fam}", "", "| benchmark | time | GB/s | GFLOP/s | % of ceiling | % of vendor | % of torch | rel. error | note |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
            for b in bs:
                vendor = ratios.get(name_of(b))
                vs = f"{vendor[1]:.3g} ({vendor[0]})" if vendor else ""
                lines.append(f"| `{name_of(b)}` | {fmt_time(b)} | {fmt(gbs(b))} | {fmt(b.get('GFLOP/s'))} | "
                             f"{fmt(b.get('pct_of_ceiling'), 3)} | {vs} | {versus_torch.get(name_of(b), '')} | {'unchecked' if b.get('unchecked') else fmt(b.get('rel_error'), 2)} | "
                             f"{'; '.join(x for x in (speedups.get(name_of(b)), b.get('label'), b.get('error_message')) if x)} |")
            lines.append("")
        for img in images.get(path, []):
            lines += [f"![{img}]({os.path.relpath(img, os.path.dirname(out) or '.')})", ""]
    text = "\n".join(lines)
    if os.path.exists(out):
        with open(out) as f:
            old = f.read()
        if BEGIN in old and END in old:
            head, rest = old.split(BEGIN, 1)
            tail = rest.split(END, 1)[1]
            body = "\n".join(lines[2:])  # the generated part without its own title
            text = f"{head}{BEGIN}\n{body}\n{END}{tail}"
    with open(out, "w") as f:
        f.write(text)


def save(fig, directory, name):
    """Writes a finished chart as a PNG and frees it; returns the file's path."""
    fig.tight_layout()
    out = os.path.join(directory, name)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def stems(paths):
    """A name per run for its heading and chart files: its file name, or for runs sharing one (every
    device check writes bench.json) the path below those runs' common folder, so that no run's charts
    overwrite another's and the headings tell them apart. Other runs keep their file names."""
    plain = {p: os.path.splitext(os.path.basename(p))[0] for p in paths}
    names = dict(plain)
    for stem in set(plain.values()):
        same = [p for p in paths if plain[p] == stem]
        if len(same) > 1:
            common = os.path.commonpath([os.path.abspath(p) for p in same])
            for p in same:
                names[p] = os.path.splitext(os.path.relpath(os.path.abspath(p), common))[0].replace(os.sep, "-")
    return names


def charts(path, stem, ctx, rows, directory):
    os.makedirs(directory, exist_ok=True)
    made = []
    bw = [(name_of(b), gbs(b)) for b in rows if gbs(b)]
    if bw:
        fig, ax = plt.subplots(figsize=(10, 0.35 * len(bw) + 1.5))
        ax.barh([n for n, _ in bw], [v for _, v in bw], color="#4477aa")
        for key, label, style in (("ceiling_d2d_copy_gbs", "device copy", "-"),
                                  ("ceiling_h2d_pinned_gbs", "pinned H2D", "--"),
                                  ("ceiling_d2h_pinned_gbs", "pinned D2H", ":")):
            if key in ctx:
                ax.axvline(float(ctx[key]), color="#cc3311", linestyle=style, label=f"{label} ceiling ({ctx[key]} GB/s)")
        ax.set_xlabel("GB/s (achieved; lines: ceilings measured in the same run)")
        ax.set_title(f"{ctx.get('device', '?')}: bandwidth ({ctx.get('figures', '')})", fontsize=9)
        ax.legend(fontsize=8, loc="lower right")
        made.append(save(fig, directory, f"{stem}-bandwidth.png"))
    roof = [(name_of(b), b["flops_per_iter"] / b["bytes_per_iter"], b["GFLOP/s"]) for b in rows
            if b.get("GFLOP/s") and b.get("flops_per_iter") and b.get("bytes_per_iter")]
    if roof and ctx.get("ceiling_d2d_copy_gbs"):
        bw = float(ctx["ceiling_d2d_copy_gbs"])
        fig, ax = plt.subplots(figsize=(7, 5))
        lo = min(i for _, i, _ in roof) / 10
        hi = max(i for _, i, _ in roof) * 10
        xs = [lo * (hi / lo) ** (k / 100) for k in range(101)]
        # One roof per measured compute ceiling (fp32 points sit under the SGEMM roof, bf16/fp8/int8
        # under the bf16 one); the memory roof alone where none was measured (the sim).
        peaks = [(label, float(ctx[key]), style) for key, label, style in
                 (("ceiling_sgemm_tflops", "SGEMM", "-"), ("ceiling_bf16_gemm_tflops", "bf16 GEMM", "--"))
                 if ctx.get(key) not in (None, "", "n/a")]
        for label, peak, style in peaks or [(None, None, "-")]:
            ys = [bw * x if peak is None else min(bw * x, peak * 1e3) for x in xs]  # GB/s x FLOP/byte = GFLOP/s
            ax.loglog(xs, ys, color="#cc3311", linestyle=style,
                      label=f"roof: {bw} GB/s" + (f", {label} {peak:g} TFLOP/s" if peak is not None else ""))
        for name, i, g in roof:
            ax.loglog([i], [g], "o")
            ax.annotate(name, (i, g), fontsize=7)
        ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
        ax.set_ylabel("GFLOP/s")
        ax.set_title(f"{ctx.get('device', '?')}: roofline ({ctx.get('figures', '')})", fontsize=9)
        ax.legend(fontsize=8)
        made.append(save(fig, directory, f"{stem}-roofline.png"))
    ratios = vendor_ratios(rows)
    if ratios:
        names = list(ratios)
        fig, ax = plt.subplots(figsize=(10, 0.35 * len(names) + 1.5))
        ax.barh([f"{n} vs {ratios[n][0]}" for n in names], [ratios[n][1] for n in names], color="#aa3377")
        ax.axvline(100, color="black", linestyle="--", label="vendor library = 100%")
        ax.set_xlabel("% of the vendor library's speed (vendor time / tessel time; higher is better)")
        ax.set_title(f"{ctx.get('device', '?')}: tessel vs cuBLAS / cuDNN / CUB ({ctx.get('figures', '')})", fontsize=9)
        ax.legend(fontsize=8, loc="lower right")
        made.append(save(fig, directory, f"{stem}-vs-vendor.png"))
    fl = [(name_of(b), b["GFLOP/s"]) for b in rows if b.get("GFLOP/s")]
    if fl:
        fig, ax = plt.subplots(figsize=(10, 0.35 * len(fl) + 1.5))
        ax.barh([n for n, _ in fl], [v for _, v in fl], color="#228833")
        ax.set_xlabel("GFLOP/s")
        ax.set_title(f"{ctx.get('device', '?')}: arithmetic rate ({ctx.get('figures', '')})", fontsize=9)
        made.append(save(fig, directory, f"{stem}-flops.png"))
    return made


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="Google Benchmark JSON files")
    p.add_argument("--markdown", required=True, help="Markdown file to write")
    p.add_argument("--images", required=True, help="folder for the PNG charts")
    a = p.parse_args()
    runs = {path: load(path) for path in a.runs}
    names = stems(list(runs))
    images = {path: charts(path, names[path], ctx, rows, a.images) for path, (ctx, rows) in runs.items()}
    write_markdown(runs, a.markdown, images, names)
    total = sum(len(v) for v in images.values())
    print(f"report: {sum(len(r) for _, r in runs.values())} benchmarks, {total} chart(s) -> {a.markdown}")
    return 0 if total else 1


if __name__ == "__main__":
    sys.exit(main())
