#!/usr/bin/env python3
"""Checks bench/report.py on constructed runs: vendor pairing and its percentage, PyTorch pairing (eager
and torch.compile, by name, same device only), the vs-vendor chart,
the current/superseded marking, a failed benchmark's message, that an existing document keeps its prose outside the markers,
and that runs sharing a file name keep a chart each."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(path, device, date, rows, backend="cuda"):
    ctx = {"device": device, "backend": backend, "date": date, "figures": "GPU figures, CUDA event timing",
           "ceiling_d2d_copy_gbs": "4000.0"}
    bench = [{"name": n, "run_type": "iteration", "real_time": t, "time_unit": "us", "GB/s": g} for n, t, g in rows]
    with open(path, "w") as f:
        json.dump({"context": ctx, "benchmarks": bench}, f)


def main():
    with tempfile.TemporaryDirectory() as d:
        new, old = os.path.join(d, "2026-12-02-h200.json"), os.path.join(d, "2026-12-01-h200.json")
        # tessel takes 125 us where CUB takes 100 us: 80% of CUB's speed.
        run_json(new, "NVIDIA H200", "2026-12-02", [("BM_sum/tessel/268435456", 125.0, 3000.0),
                                                    ("BM_sum/cub/268435456", 100.0, 3750.0),
                                                    ("BM_copy/1024", 10.0, 100.0),
                                                    ("BM_matmul/tessel/f32/1024", 10.0, None),
                                                    ("BM_matmul/cublas/f32/1024", 8.0, None),
                                                    ("BM_matmul/openblas/f32/1024", 1000.0, None)])
        run_json(old, "NVIDIA H200", "2026-12-01", [("BM_copy/1024", 11.0, 90.0)])
        # PyTorch's eager sum takes 150 us and torch.compile 100 us, tessel 125 us: 120% and 80%;
        # a softmax without an implementation component in tessel's name pairs too (50 us vs 100 us).
        torch_run = os.path.join(d, "2026-12-02-h200-torch.json")
        run_json(torch_run, "NVIDIA H200", "2026-12-02", [("BM_sum/torch/268435456", 150.0, 2500.0),
                                                          ("BM_sum/torch_compile/268435456", 100.0, 3750.0),
                                                          ("BM_softmax/torch/1024", 100.0, 1000.0),
                                                          ("BM_layer_norm/torch/1024", 100.0, 1000.0)], backend="torch")
        run_json(os.path.join(d, "other.json"), "NVIDIA H100", "2026-12-02", [("BM_softmax/1024", 80.0, 1000.0)])
        with open(new) as f:
            j = json.load(f)
        j["benchmarks"].append({"name": "BM_softmax/1024", "run_type": "iteration", "real_time": 50.0, "time_unit": "us"})
        # PyTorch's rows are medians: tessel's median (40 us) is set against them, not its mean (50 us).
        j["benchmarks"].append({"name": "BM_layer_norm/1024", "run_type": "iteration", "real_time": 50.0, "time_unit": "us",
                                "median_s": 40e-6})
        # A reported call whose result check did not run (bench/harness.hpp's check_result) says so.
        j["benchmarks"].append({"name": "BM_col_sum/manual_time", "run_type": "iteration", "real_time": 10.0, "time_unit": "us",
                                "unchecked": 1})
        # A benchmark that threw: Google Benchmark writes no time and no counters, only the message.
        j["benchmarks"].append({"name": "BM_rms_norm/4096", "run_type": "iteration", "error_occurred": True,
                                "error_message": "out of memory on device 0", "real_time": 0, "time_unit": "us"})
        with open(new, "w") as f:
            json.dump(j, f)
        md = os.path.join(d, "benchmarks.md")
        with open(md, "w") as f:
            f.write("# Title\n\nprose before\n\n<!-- report:begin -->\nstale\n<!-- report:end -->\n\nprose after\n")
        subprocess.run([sys.executable, os.path.join(HERE, "report.py"), new, old, torch_run, os.path.join(d, "other.json"), "--markdown", md,
                        "--images", os.path.join(d, "img")], check=True)
        text = open(md).read()
        checks = {
            "prose before kept": "prose before" in text,
            "prose after kept": "prose after" in text,
            "stale block replaced": "stale" not in text,
            "80% of cub in the sum row": "| 80 (cub) | 120 (eager), 80 (compile) |" in text,
            "softmax pairs with torch by name": "| `BM_softmax/1024` | 50 us |  |  |  |  | 200 (eager) |" in text,
            "an unchecked result says so": "| `BM_col_sum/manual_time` | 10 us |  |  |  |  |  | unchecked |" in text,
            "tessel's median against torch's median": "| `BM_layer_norm/1024` | 50 us |  |  |  |  | 250 (eager) |" in text,
            "another device's softmax has no torch figure": "| `BM_softmax/1024` | 80 us | 1000 |  |  |  |  |" in text,
            "speed-up over the CPU beside tessel's row": "| 80 (cublas) |  |  | 100x openblas (CPU) |" in text,
            "and beside the vendor's": "| `BM_matmul/cublas/f32/1024` | 8 us |  |  |  |  |  |  | 125x openblas (CPU) |" in text,
            "a failed benchmark says so and why": "| `BM_rms_norm/4096` | failed |" in text and "out of memory on device 0 |" in text,
            "newer run current": "2026-12-02-h200.json (current)" in text,
            "older run superseded": "2026-12-01-h200.json (superseded" in text,
            "vs-vendor chart": os.path.getsize(os.path.join(d, "img", "2026-12-02-h200-vs-vendor.png")) > 1000,
            "no vendor chart without pairs": not os.path.exists(os.path.join(d, "img", "2026-12-01-h200-vs-vendor.png")),
        }
        # Two runs with one file name (each device check writes bench.json): a chart each.
        for sub, device in (("a", "NVIDIA H200"), ("b", "NVIDIA H100")):
            os.makedirs(os.path.join(d, "twin", sub))
            run_json(os.path.join(d, "twin", sub, "bench.json"), device, "2026-12-02", [("BM_copy/1024", 10.0, 100.0)])
        subprocess.run([sys.executable, os.path.join(HERE, "report.py"), os.path.join(d, "twin", "a", "bench.json"),
                        os.path.join(d, "twin", "b", "bench.json"), "--markdown", os.path.join(d, "twin.md"), "--images",
                        os.path.join(d, "twin-img")], check=True)
        checks["runs sharing a file name keep a chart each"] = sorted(os.listdir(os.path.join(d, "twin-img"))) == [
            "a-bench-bandwidth.png", "b-bench-bandwidth.png"]
        twin = open(os.path.join(d, "twin.md")).read()
        checks["and a heading each"] = "## a-bench.json (current)" in twin and "## b-bench.json (current)" in twin
        bad = [k for k, ok in checks.items() if not ok]
        for k in bad:
            print("FAILED:", k)
        if bad:
            print(text)
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
