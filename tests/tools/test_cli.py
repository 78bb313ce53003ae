#!/usr/bin/env python3
"""The command-line tools against bad arguments, signals and the formats they promise.

Each check runs a tool and looks at its exit status, its message and its output: a bad number is
exit 2 naming the flag and the range; csv has the header's columns; json parses (one document per
line under --watch); tessel-run passes signals on, kills a rank that ignores SIGTERM, and leaves no
process behind when it cannot start them all. Checks that read a device are skipped where the
tool answers 77 (no device: a CUDA build without a GPU).

Usage: test_cli.py [--info TESSEL_INFO] [--run TESSEL_RUN] [--collectives TESSEL_COLLECTIVES_BENCH]
                   [--bench TESSEL_BENCH]"""
import argparse
import csv
import io
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time

failures = []


def check(ok, what, detail=""):
    print(("ok    " if ok else "FAIL  ") + what + ("" if ok else "\n      " + detail.replace("\n", "\n      ")))
    if not ok:
        failures.append(what)


def run(args, env=None, timeout=60, **kw):
    """args to completion; past the timeout its whole session is killed and returncode is None."""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e, start_new_session=True, **kw)
    try:
        out, err = p.communicate(timeout=timeout)
        return subprocess.CompletedProcess(args, p.returncode, out, err)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return subprocess.CompletedProcess(args, None, out, err + f"\n(killed after {timeout} s)")


def refused(args, message, what, env=None):
    """args must exit 2 (bad usage) with `message` in what it printed."""
    r = run(args, env)
    check(r.returncode == 2 and message in r.stdout + r.stderr, what,
          f"exit {r.returncode}, output: {(r.stdout + r.stderr)[-400:]!r}")


def sleeper(directory, token):
    """A sleep whose command line holds token (a link to sleep named after it), to count leftovers."""
    path = os.path.join(directory, token)
    os.symlink(subprocess.run(["sh", "-c", "command -v sleep"], capture_output=True, text=True).stdout.strip(), path)
    return path


def processes_with(token):
    """Pids of live processes whose command line holds token."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if token.encode() in f.read():
                        pids.append(int(d))
            except OSError:
                pass
    return pids


def info_checks(info):
    has_device = run([info, "--query=index"]).returncode != 77
    refused([info, "--query=index", "--watch", "inf"], "--watch='inf' is not a number", "tessel-info --watch inf is refused")
    refused([info, "--query=index", "--watch", "abc"], "--watch='abc'", "tessel-info --watch abc is refused")
    refused([info, "--query=index", "--watch", "1", "--count", "0"], "--count='0'", "tessel-info --count 0 is refused")
    refused([info, "--query=index", "--count", "3"], "--count goes with --watch", "tessel-info --count without --watch is refused")
    refused([info, "--query=index,"], "unknown field ''", "tessel-info --query with an empty field is refused")
    refused([info, "--query=index", "--format="], "--format: '' is not", "tessel-info --format= is refused")
    refused([info, "--query=index", "--format=csv,"], "--format: 'csv,' is not", "tessel-info --format=csv, is refused")
    refused([info, "--queryx=index"], "usage", "tessel-info --queryx is not taken for --query")
    refused([info, "--json", "extra"], "usage", "tessel-info --json with extra arguments is refused")
    refused([info, "--bandwidth", "abc"], "--bandwidth='abc'", "tessel-info --bandwidth abc exits 2 like the other bad numbers")
    for flag in ["--help", "-h"]:  # usage on stdout and success, as nvidia-smi -h
        r = run([info, flag])
        check(r.returncode == 0 and r.stdout.startswith("usage: tessel-info"), f"tessel-info {flag} prints its usage and succeeds",
              f"exit {r.returncode}: {r.stdout[-200:]!r} {r.stderr[-200:]!r}")
    # Bad snapshots: an error naming what is wrong, never a crash or a wrapped size.
    with tempfile.TemporaryDirectory() as d:
        good = {"tessel_snapshot": 1, "segments": [{"device": 0, "address": 4096, "total_size": 2048, "allocated_size": 512,
                                                    "active_size": 512, "stream": "0x0", "small_pool": False,
                                                    "blocks": [[512, 500, True, True], [1536, 0, False, False]]}]}
        cases = [
            ("deep nesting", "[" * 200000, "nesting deeper than 64"),
            ("a fractional version", json.dumps(good).replace('"tessel_snapshot": 1', '"tessel_snapshot": 1.5'), "tessel_snapshot"),
            ("a negative block size", json.dumps(good).replace("[512, 500", "[-5, 500"), "block size"),
            ("a requested size above the block's", json.dumps(good).replace("[512, 500", "[512, 513"), "block requested size"),
            ("a flag of 5", json.dumps(good).replace('"small_pool": false', '"small_pool": 5'), "small_pool"),
            ("blocks larger than the segment", json.dumps(good).replace("[1536, 0", "[2000, 0"), "add up to"),
            ("segments not an array", json.dumps(dict(good, segments={})), "\"segments\" must be an array"),
            ("a device out of range", json.dumps(good).replace('"device": 0', '"device": 2147483648'), "\"device\""),
            ("a stream that is not hexadecimal", json.dumps(good).replace('"0x0"', '"zz"'), "\"stream\""),
            ("a bare minus", json.dumps(good).replace('"address": 4096', '"address": -'), "a value was expected"),
        ]
        for name, text, message in cases:
            path = os.path.join(d, "snap.json")
            with open(path, "w") as f:
                f.write(text)
            r = run([info, "--memory-snapshot", path, os.path.join(d, "out.html")])
            check(r.returncode == 1 and message in r.stderr, f"tessel-info --memory-snapshot refuses {name}",
                  f"exit {r.returncode}: {r.stderr[-300:]!r}")
        path = os.path.join(d, "snap.json")
        with open(path, "w") as f:
            json.dump(good, f)
        r = run([info, "--memory-snapshot", path, os.path.join(d, "out.html")])
        check(r.returncode == 0 and "1 segments" in r.stdout, "tessel-info --memory-snapshot draws a good snapshot", r.stderr)
        r = run([info, "--memory-snapshot", d, os.path.join(d, "out.html")])
        check(r.returncode == 1 and "is a directory" in r.stderr, "tessel-info --memory-snapshot names a directory given as input", r.stderr)
    # JSON escapes control characters (the unavailable reason quotes the variable's text).
    r = run([info, "--json"], env={"TESSEL_SIM_DEVICES": "a\tb\nc"})
    try:
        json.loads(r.stdout)
        check(True, "tessel-info --json escapes control characters")
    except ValueError as e:
        check(False, "tessel-info --json escapes control characters", f"{e}: {r.stdout[-300:]!r}")
    if not has_device:
        print("skip  the checks that read a device (tessel-info answers 77: no device)")
        return
    r = run([info, "--matmul", "64", "64", "64", "bf16"], env={"TESSEL_SIM_DEVICES": "abc"})
    check(r.returncode == 77, "tessel-info --matmul without a device answers 77", f"exit {r.returncode}: {r.stdout}")
    # csv: the header's number of columns on every row, whatever the names hold; in any flag order.
    r = run([info, "--format=csv", "--query=index,name,memory.total,clocks_event_reasons.names"])
    rows = list(csv.reader(io.StringIO(r.stdout), skipinitialspace=True))
    check(r.returncode == 0 and len(rows) >= 2 and all(len(row) == len(rows[0]) for row in rows),
          "tessel-info csv rows have the header's columns (flags in any order)", r.stdout + r.stderr)
    # nounits: the values lose their units, the header keeps them (as nvidia-smi's).
    r = run([info, "--query-gpu=memory.total", "--format=csv,nounits"])
    lines = r.stdout.splitlines()
    check(r.returncode == 0 and lines[0] == "memory.total [MiB]" and lines[1].strip().isdigit(),
          "tessel-info --format=csv,nounits keeps the header's units (and --query-gpu works)", r.stdout + r.stderr)
    # json: text fields are strings whatever they look like (a driver version "560.35.03" is no JSON
    # number; compute_cap "9.0" stays "9.0"), numbers are numbers; nvidia-smi's other spellings of
    # fields (gpu_name, clocks.current.sm) name the same fields.
    r = run([info, "--query=index,compute_cap,driver_version,uuid,gpu_name,memory.total,clocks.current.sm", "--format=json"])
    try:
        d = json.loads(r.stdout)[0]
        check(r.returncode == 0 and isinstance(d["index"], int) and isinstance(d["compute_cap"], str) and
              isinstance(d["driver_version"], str) and isinstance(d["uuid"], str) and isinstance(d["name"], str) and
              isinstance(d["memory.total"], (int, float)) and isinstance(d["clocks.sm"], (int, float)),
              "tessel-info --format=json quotes text fields and takes nvidia-smi's aliases", r.stdout)
    except (ValueError, KeyError, IndexError) as e:
        check(False, "tessel-info --format=json quotes text fields and takes nvidia-smi's aliases", f"{e}: {r.stdout!r} {r.stderr!r}")
    # json with --watch: one document per line.
    r = run([info, "--query=index,name,power.draw", "--format=json", "--watch", "0.05", "--count", "2"])
    try:
        docs = [json.loads(line) for line in r.stdout.splitlines()]
        check(r.returncode == 0 and len(docs) == 2 and all(isinstance(d, list) and d and "index" in d[0] for d in docs),
              "tessel-info --format=json --watch writes one JSON array per line", r.stdout)
    except ValueError as e:
        check(False, "tessel-info --format=json --watch writes one JSON array per line", f"{e}: {r.stdout!r}")
    # --prometheus through a symbolic link replaces the link's target, not the link; a fifo is written in place.
    with tempfile.TemporaryDirectory() as d:
        link, target = os.path.join(d, "gpu.prom"), os.path.join(d, "real.prom")
        os.symlink("real.prom", link)
        r = run([info, "--prometheus", link])
        written = open(target).read() if os.path.isfile(target) else ""
        check(r.returncode == 0 and os.path.islink(link) and "# TYPE tessel_gpu_power_watts gauge" in written,
              "tessel-info --prometheus through a link writes the link's target", r.stderr)
        fifo = os.path.join(d, "fifo")
        os.mkfifo(fifo)
        reader = subprocess.Popen(["cat", fifo], stdout=subprocess.PIPE, text=True)
        r = run([info, "--prometheus", fifo])
        try:
            out = reader.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:  # tessel-info never opened the fifo
            reader.kill()
            out = reader.communicate()[0]
        check(r.returncode == 0 and "tessel_gpu_temperature_celsius" in out and not os.path.isfile(fifo),
              "tessel-info --prometheus writes a fifo in place", r.stderr)


def run_checks(tr):
    refused([tr, "-n", "2x", "true"], "-n='2x' is not an integer between 1 and 1024", "tessel-run -n 2x is refused")
    refused([tr, "-n", "99999999999", "true"], "-n='99999999999'", "tessel-run -n 99999999999 is refused")
    refused([tr, "-n", "1", "--grace", "nan", "true"], "--grace='nan'", "tessel-run --grace nan is refused")
    refused([tr, "-n", "1", "--grace", "-1", "true"], "--grace='-1'", "tessel-run --grace -1 is refused")
    refused([tr, "-n", "1", "--master-port", "0", "true"], "--master-port='0'", "tessel-run --master-port 0 is refused")
    r = run([tr, "-n", "2", "--", "sh", "-c", "echo rank $RANK of $WORLD_SIZE"])
    check(r.returncode == 0 and "[rank 1] rank 1 of 2" in r.stdout, "tessel-run -- ends its options", r.stdout + r.stderr)
    # torchrun's spellings; the job's own MASTER_ADDR, never one inherited from the environment.
    r = run([tr, "--nproc_per_node=2", "--master_port=29517", "sh", "-c", "echo rank $RANK of $WORLD_SIZE at $MASTER_ADDR:$MASTER_PORT"],
            env={"MASTER_ADDR": "192.0.2.1"})
    check(r.returncode == 0 and "[rank 1] rank 1 of 2 at 127.0.0.1:29517" in r.stdout,
          "tessel-run takes --option=value and torchrun's underscores, and sets MASTER_ADDR itself", r.stdout + r.stderr)
    r = run([tr, "-n", "1", "--master-addr", "localhost", "sh", "-c", "echo at $MASTER_ADDR"])
    check(r.returncode == 0 and "[rank 0] at localhost" in r.stdout, "tessel-run --master-addr sets the ranks' MASTER_ADDR", r.stdout + r.stderr)
    # The free port is found where rank 0's store will listen: an address not on this host is refused
    # before any rank starts (192.0.2.1 is TEST-NET-1, never a local address).
    r = run([tr, "-n", "1", "--master-addr", "192.0.2.1", "sh", "-c", "echo started"])
    check(r.returncode != 0 and "must name this host" in r.stderr and "started" not in r.stdout,
          "tessel-run refuses a --master-addr this host cannot listen on", r.stdout + r.stderr)
    refused([tr, "--nproc-per-node=0", "true"], "-n='0'", "tessel-run --nproc-per-node=0 is refused")
    r = run([tr, "--help"])
    check(r.returncode == 0 and "usage: tessel-run" in r.stdout, "tessel-run --help prints its usage and succeeds", r.stdout + r.stderr)

    # A signal to tessel-run reaches every rank, and no rank outlives it.
    scratch = tempfile.TemporaryDirectory()
    token = f"tessel-run-check-{os.getpid()}"
    sleep = sleeper(scratch.name, token)

    def signalled(launcher, ranks, seconds, sig, whole_group):
        """Starts `launcher tessel-run -n ranks` of a sleep, waits until every rank has become the sleep
        (its path comes through the environment, so only the sleep itself shows the token), sends sig to
        tessel-run or to its process group, and returns (exit status, output)."""
        p = subprocess.Popen(launcher + [tr, "-n", str(ranks), "--", "sh", "-c", f'echo up; exec "$SLEEPER" {seconds}'],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                             env=dict(os.environ, SLEEPER=sleep))
        deadline = time.time() + 20
        while len(processes_with(token)) < ranks and time.time() < deadline:
            time.sleep(0.05)
        os.killpg(p.pid, sig) if whole_group else p.send_signal(sig)
        try:
            out = p.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out = p.communicate()[0]
        time.sleep(0.2)
        return p.returncode, out

    rc, out = signalled([], 2, 30, signal.SIGTERM, False)
    check(rc == -signal.SIGTERM and not processes_with(token) and "passing it to the ranks" in out,
          "SIGTERM to tessel-run ends every rank, and tessel-run exits by it", f"exit {rc}, left {processes_with(token)}: {out!r}")
    # Ctrl-C: SIGINT to the whole process group, so the ranks die of it at once too. tessel-run must
    # still end by SIGINT (a shell script then stops), not report the ranks as failures.
    rc, out = signalled([], 2, 30, signal.SIGINT, True)
    check(rc == -signal.SIGINT and "failed" not in out and not processes_with(token),
          "Ctrl-C (SIGINT to the process group) ends tessel-run by SIGINT", f"exit {rc}: {out!r}")
    # SIGHUP ignored by the caller (nohup) stays ignored, in tessel-run and in its ranks.
    rc, out = signalled(["nohup"], 1, 2, signal.SIGHUP, True)
    check(rc == 0, "a SIGHUP that nohup ignores does not end tessel-run or its ranks", f"exit {rc}: {out!r}")
    # A process a rank leaves behind, writing to the rank's output for ever: tessel-run still ends.
    r = run([tr, "-n", "1", "--", "sh", "-c", "yes tessel-run-check & echo rank done"], timeout=30)
    check(r.returncode == 0 and "[rank 0] rank done" in r.stdout, "tessel-run ends when its ranks do, whatever they left behind",
          f"exit {r.returncode}: {r.stderr[-300:]!r}")
    # A rank that ignores SIGTERM after another failed is killed one grace period later. Rank 0 fails
    # only once rank 1 has set its trap (a marker file), however slowly a loaded machine starts them.
    marker = os.path.join(scratch.name, "trapped")
    t0 = time.time()
    r = run([tr, "-n", "2", "--grace", "0.3", "--", "sh", "-c",
             f'if [ $RANK = 0 ]; then while [ ! -e {marker} ]; do sleep 0.05; done; exit 3; fi; '
             f'trap "" TERM; touch {marker}; while :; do sleep 0.1; done'], timeout=30)
    check(r.returncode == 3 and time.time() - t0 < 10 and "killing the ranks" in r.stderr,
          "a rank that ignores SIGTERM is killed after another grace period", f"exit {r.returncode}: {r.stderr!r}")
    # The grace period runs even when every rank has closed its output.
    t0 = time.time()
    r = run([tr, "-n", "2", "--grace", "0.3", "--", "sh", "-c",
             "exec >/dev/null 2>&1; if [ $RANK = 1 ]; then exit 3; fi; exec sleep 30"], timeout=40)
    check(r.returncode == 3 and time.time() - t0 < 10, "ranks with closed outputs are still terminated after the grace period",
          f"exit {r.returncode} after {time.time() - t0:.1f} s: {r.stderr!r}")
    # Out of descriptors part-way: the ranks already started are ended, not orphaned.
    token = f"tessel-run-fds-{os.getpid()}"
    sleep = sleeper(scratch.name, token)
    limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (30, 30))
    r = run([tr, "-n", "40", "--", sleep, "30"], preexec_fn=limit)
    time.sleep(0.2)
    check(r.returncode == 1 and "Too many open files" in r.stderr and not processes_with(token),
          "tessel-run out of descriptors leaves no rank behind", f"exit {r.returncode}, left {len(processes_with(token))}: {r.stderr!r}")


def collectives_checks(cb):
    for flag in ["--help", "-h"]:  # without a device too
        r = run([cb, flag])
        check(r.returncode == 0 and r.stdout.startswith("usage: tessel-collectives-bench") and "--op" in r.stdout,
              f"tessel-collectives-bench {flag} prints its usage", f"exit {r.returncode}: {r.stdout[-200:]!r} {r.stderr[-200:]!r}")
    if run([cb, "-b", "8", "-e", "8", "--iters", "1", "--warmup", "0", "--op", "all_reduce"]).returncode == 77:
        print("skip  tessel-collectives-bench (no device)")
        return
    for args, message in [(["-b", "0.5"], "-b='0.5' is not a size"), (["-f", "abc"], "-f='abc'"), (["--iters", "abc"], "--iters='abc'"),
                          (["--warmup", "-1"], "--warmup='-1'"), (["-b", "1K", "-e", "8"], "is larger than -e"),
                          (["--json", "/nonexistent/x.json", "-b", "8", "-e", "8"], "--json: cannot write")]:
        r = run([cb] + args)
        check(r.returncode == 1 and message in r.stderr and "tessel-collectives-bench: tessel-collectives-bench" not in r.stderr,
              f"tessel-collectives-bench {' '.join(args)} is refused", f"exit {r.returncode}: {r.stderr[-300:]!r}")
    # The last --op wins (all: every collective); every sweep, all_gather's included, stays within
    # -b..-e, as nccl-tests' (its size column is the gathered output).
    sweep = [cb, "-b", "1K", "-e", "4K", "-f", "4", "--iters", "1", "--warmup", "0", "--op", "all_reduce", "--op", "all"]
    r = run(sweep + ["-g", "2"], env={"TESSEL_SIM_DEVICES": "2"})  # two simulated devices; a GPU machine may have one
    if r.returncode != 0 and "does not exist" in r.stderr:
        r = run(sweep + ["-g", "1"])
    sizes, op = {}, None
    for line in r.stdout.splitlines():
        if line.startswith("# ") and line[2:].strip() and " " not in line[2:].strip():
            op = line[2:].strip()
        elif op and line.strip() and not line.startswith("#"):
            sizes.setdefault(op, []).append(int(line.split()[0]))
    check(r.returncode == 0 and len(sizes) == 6 and all(v == [1024, 4096] for v in sizes.values()),
          "tessel-collectives-bench: the last --op wins, and every sweep keeps within -b..-e", f"{sizes}: {r.stdout[-600:]!r}")


def bench_checks(bench):
    for flt in ["nothing_matches_this", "("]:
        r = run([bench, f"--benchmark_filter={flt}"])
        if r.returncode == 77:
            print("skip  tessel-bench (no device)")
            return
        check(r.returncode == 1, f"tessel-bench --benchmark_filter='{flt}' (no benchmark run) exits 1", f"exit {r.returncode}")


def main():
    ap = argparse.ArgumentParser()
    for tool in ["info", "run", "collectives", "bench"]:
        ap.add_argument("--" + tool)
    a = ap.parse_args()
    if a.info:
        info_checks(a.info)
    if a.run:
        run_checks(a.run)
    if a.collectives:
        collectives_checks(a.collectives)
    if a.bench:
        bench_checks(a.bench)
    print(f"{len(failures)} failed" + (": " + "; ".join(failures) if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
