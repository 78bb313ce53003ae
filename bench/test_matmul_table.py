#!/usr/bin/env python3
"""Checks bench/matmul_table.py on constructed runs: pairing by name, shape classes, the geometric mean
of a class's ratios, the faster path chosen, sim runs ignored, and that the generated header compiles
and is what tessel's lookup reads (a C++ check of matmul_table_entry and automatic_choice)."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(path, backend, rows, cc="9.0"):
    ctx = {"device": "NVIDIA H200", "backend": backend, "date": "2026-12-02", "compute_capability": cc}
    bench = [{"name": n + "/manual_time", "run_type": "iteration", "real_time": t, "time_unit": "us"} for n, t in rows]
    with open(path, "w") as f:
        json.dump({"context": ctx, "benchmarks": bench}, f)


def main():
    with tempfile.TemporaryDirectory() as d:
        gpu, sim = os.path.join(d, "gpu.json"), os.path.join(d, "sim.json")
        run(gpu, "cuda", [
            ("BM_matmul/tessel/bf16/4096", 125.0), ("BM_matmul/cublas/bf16/4096", 100.0),            # large bf16: library (80%)
            ("BM_matmul/tessel/bf16/8192", 800.0), ("BM_matmul/cublas/bf16/8192", 1000.0),           # ... and 125%: geo mean 100% -> library
            ("BM_matmul_llm/tessel/bf16/16x4096x4096", 40.0), ("BM_matmul_llm/cublas/bf16/16x4096x4096", 50.0),  # decode: handwritten
            ("BM_linear_bias_gelu/tessel/bf16", 90.0), ("BM_linear_bias_gelu/cublas/bf16", 120.0),   # fused large: handwritten
            ("BM_matmul/tessel/f32/4096", 110.0),                                                     # no cuBLAS pair: no entry
        ])
        run(sim, "sim", [("BM_matmul/tessel/f32/256", 1.0), ("BM_matmul/cublas/f32/256", 100.0)])
        out = os.path.join(d, "matmul_table.hpp")
        subprocess.run([sys.executable, os.path.join(HERE, "matmul_table.py"), gpu, sim, "--out", out], check=True)
        text = open(out).read()
        assert 'Entry{9, "bf16", "none", "large", false, 100.0}' in text, text
        assert 'Entry{9, "bf16", "none", "decode", true, 125.0}' in text, text
        assert 'Entry{9, "bf16", "fused", "large", true, 133.3}' in text, text
        assert "fp32" not in text.split("entries")[1], text
        assert "gpu.json (NVIDIA H200, 2026-12-02)" in text and "sim.json" not in text, text
        # The lookup tessel compiles against this table.
        tu = os.path.join(d, "check.cpp")
        with open(tu, "w") as f:
            f.write("""
#include <cassert>
#include "%s"
#define TESSEL_MATMUL_TABLE_INCLUDED 1
#include <tessel/ops/matmul_policy.hpp>
int main() {
    assert(tessel::automatic_choice(9, "bf16", false, 16, 4096).path == tessel::MatmulPolicy::handwritten);
    assert(tessel::automatic_choice(9, "bf16", false, 4096, 4096).path == tessel::MatmulPolicy::library);
    assert(tessel::automatic_choice(9, "bf16", true, 4096, 4096).entry->handwritten_pct_of_library > 133);
    assert(tessel::automatic_choice(8, "bf16", false, 16, 4096).entry == nullptr);
    assert(tessel::automatic_choice(9, "fp32", false, 4096, 4096).path == tessel::MatmulPolicy::library);
    return 0;
}
""" % out)
        exe = os.path.join(d, "check")
        subprocess.run(["c++", "-std=c++20", "-I", os.path.join(ROOT, "include"), tu, "-o", exe], check=True)
        subprocess.run([exe], check=True)
        # With no GPU run the generator writes the committed empty table.
        subprocess.run([sys.executable, os.path.join(HERE, "matmul_table.py"), sim, "--out", out], check=True)
        assert open(out).read() == open(os.path.join(ROOT, "include", "tessel", "ops", "matmul_table.hpp")).read()
    print("matmul_table: ok")


if __name__ == "__main__":
    main()
