#!/usr/bin/env python3
"""Checks bench/report.py on constructed runs: vendor pairing and its percentage, the vs-vendor chart,
the current/superseded marking, and that an existing document keeps its prose outside the markers."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(path, device, date, rows):
    ctx = {"device": device, "backend": "cuda", "date": date, "figures": "GPU figures, CUDA event timing",
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
                                                    ("BM_copy/1024", 10.0, 100.0)])
        run_json(old, "NVIDIA H200", "2026-12-01", [("BM_copy/1024", 11.0, 90.0)])
        md = os.path.join(d, "benchmarks.md")
        with open(md, "w") as f:
            f.write("# Title\n\nprose before\n\n<!-- report:begin -->\nstale\n<!-- report:end -->\n\nprose after\n")
        subprocess.run([sys.executable, os.path.join(HERE, "report.py"), new, old, "--markdown", md,
                        "--images", os.path.join(d, "img")], check=True)
        text = open(md).read()
        checks = {
            "prose before kept": "prose before" in text,
            "prose after kept": "prose after" in text,
            "stale block replaced": "stale" not in text,
            "80% of cub in the sum row": "| 80 (cub) |" in text,
            "newer run current": "2026-12-02-h200.json (current)" in text,
            "older run superseded": "2026-12-01-h200.json (superseded" in text,
            "vs-vendor chart": os.path.getsize(os.path.join(d, "img", "2026-12-02-h200-vs-vendor.png")) > 1000,
            "no vendor chart without pairs": not os.path.exists(os.path.join(d, "img", "2026-12-01-h200-vs-vendor.png")),
        }
        bad = [k for k, ok in checks.items() if not ok]
        for k in bad:
            print("FAILED:", k)
        if bad:
            print(text)
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
