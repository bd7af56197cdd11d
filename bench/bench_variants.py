#!/usr/bin/env python3
"""The kernel variants on this CPU (docs/tuning.md): what `loom tune` picks, and
each family's variants timed on real work with the choice forced
(LOOM_VARIANTS), side by side in one run, medians.

    python3 bench/bench_variants.py --build build --model MODEL.gguf [--reps 3]
    python3 bench/bench_variants.py --build build --model MODEL.gguf --fa-vs-gemm

Prints markdown: the tune table, then per family and test the speed of each
variant, the one measurement picked, and picked / best (the target: >= 0.95).
Run it alone on the machine (flock /tmp/loom-bench.lock).
"""
import argparse
import csv
import io
import os
import re
import statistics
import subprocess
import sys
import tempfile


def run(cmd, env_extra):
    env = dict(os.environ)
    env.update(env_extra)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr[-2000:]))
    return r.stdout


def loom_bench(args, model, extra, variants):
    """median t/s of each test row of `loom bench ... -o csv`, keyed by (test, threads)."""
    out = run([os.path.join(args.build, "loom"), "bench", "-m", model, "-r", str(args.reps), "-o", "csv"] + extra,
              {"LOOM_WISDOM": "off", "LOOM_VARIANTS": variants})
    rows = {}
    for rec in csv.DictReader(io.StringIO(out)):
        test = ("pp%s" % rec["n_prompt"]) if rec["n_prompt"] != "0" else ("tg%s" % rec["n_gen"])
        if rec["n_depth"] != "0":
            test += " @ d" + rec["n_depth"]
        rows[(test, int(rec["n_threads"]))] = float(rec["median_ts"])
    return rows


def matmul(args, variants):
    """GFLOP/s of bench_matmul's bf16 prefill rows, keyed by (shape, threads)."""
    out = run([os.path.join(args.build, "bench", "bench_matmul"), "--threads", "1,2", "--dtypes", "bf16",
               "--sets", "prefill", "--reps", "5"], {"LOOM_WISDOM": "off", "LOOM_VARIANTS": variants})
    rows = {}
    for line in out.splitlines():
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) > 8 and c[0] == "prefill" and c[4] == "bf16":
            rows[("GEMM %sx%sx%s" % (c[1], c[2], c[3]), int(c[6]))] = float(c[8])
    return rows


def attention(args, variants):
    """ms of bench_attention's bf16 prefill (fused) at S = 2048, keyed by (N/N_kv, threads)."""
    out = run([os.path.join(args.build, "bench", "bench_attention"), "--threads", "1,2", "--dtypes", "bf16",
               "--sets", "prefill", "--seqs", "2048", "--reps", "3", "--fused-only"],
              {"LOOM_WISDOM": "off", "LOOM_VARIANTS": variants})
    rows = {}
    for line in out.splitlines():
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) > 5 and c[0] == "bf16" and c[1] == "2048":
            rows[("FA prefill S 2048 N %s" % c[2], int(c[3]))] = float(c[5])  # GFLOP/s
    return rows


def fa_vs_gemm(args):
    """f32 FlashAttention prefill at S = 2048 (fused, causal, MHA and GQA) against loom's f32 GEMM
    (2048^3 and the 512 x 4096 x 4096 prefill shape) in the same run, 1 and 2 threads."""
    env = {"LOOM_WISDOM": "off"}
    out = run([os.path.join(args.build, "bench", "bench_matmul"), "--threads", "1,2", "--dtypes", "f32",
               "--sets", "square,prefill", "--reps", "3"], env)
    gemm, col = {}, None
    for line in out.splitlines():
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if c[:2] == ["set", "M"]:  # columns by their header (bench_matmul's table grows)
            col = {name: i for i, name in enumerate(c)}
            continue
        if col and len(c) == len(col) and c[col["dtype"]] == "f32" and \
                [c[col[k]] for k in "MNK"] in (["2048", "2048", "2048"], ["512", "4096", "4096"]):
            gemm.setdefault(int(c[col["threads"]]), []).append(float(c[col["GFLOP/s"]]))
    out = run([os.path.join(args.build, "bench", "bench_attention"), "--threads", "1,2", "--dtypes", "f32",
               "--sets", "prefill", "--seqs", "2048", "--reps", "3", "--fused-only"], env)
    print("| N/N_kv | threads | FA prefill GFLOP/s | GEMM GFLOP/s (2048^3, 512x4096x4096) | FA / best GEMM |")
    print("|---|---:|---:|---:|---:|")
    for line in out.splitlines():
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) > 5 and c[0] == "f32" and c[1] == "2048":
            t, fa = int(c[3]), float(c[5])
            g = gemm.get(t, [0])
            print("| %s | %d | %.0f | %s | %.2f |" % (c[2], t, fa, ", ".join("%.0f" % x for x in g), fa / max(g)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", required=True, help="a GGUF (SmolLM2-135M Q4_1: converted to bf16 here)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--fa-vs-gemm", action="store_true", help="only the FlashAttention / GEMM table")
    args = ap.parse_args()
    if args.fa_vs_gemm:
        fa_vs_gemm(args)
        return
    loom = os.path.join(args.build, "loom")
    with tempfile.TemporaryDirectory() as tmp:
        print("```")
        print(run([loom, "tune", "--remeasure"], {"LOOM_WISDOM": os.path.join(tmp, "w.json")}).rstrip())
        print("```\n")
        picked = {}
        for line in run([loom, "tune"], {"LOOM_WISDOM": os.path.join(tmp, "w.json")}).splitlines():
            m = re.match(r"^\| (\S+) \| .* \| (\S+) \| (measured|wisdom) \|", line)
            if m:
                picked[m.group(1)] = m.group(2)
        bf16 = os.path.join(tmp, "bf16.gguf")
        run([loom, "convert", args.model, bf16, "--type", "bf16"], {})
        tests = [
            ("gemm.bf16", ("native", "widen"), "GFLOP/s", lambda v: matmul(args, "gemm.bf16=" + v)),
            ("gemm.bf16", ("native", "widen"), "t/s", lambda v: loom_bench(
                args, bf16, ["-p", "512", "-n", "0", "-t", "1,2"], "gemm.bf16=" + v)),
            ("attention.bf16", ("native", "widen"), "GFLOP/s", lambda v: attention(args, "attention.bf16=" + v)),
            ("attention.bf16", ("native", "widen"), "t/s", lambda v: loom_bench(
                args, args.model, ["-p", "0", "-n", "64", "-d", "1024", "--kv-dtype", "bf16", "-t", "1,2"],
                "attention.bf16=" + v)),
            ("attention.i8", ("vnni", "widen"), "t/s", lambda v: loom_bench(
                args, args.model, ["-p", "0", "-n", "64", "-d", "1024", "--kv-dtype", "i8", "-t", "1,2"],
                "attention.i8=" + v)),
            ("gemv.q4_full", ("bf16", "fma"), "t/s", lambda v: loom_bench(
                args, args.model, ["-p", "0", "-n", "64", "--act-precision", "full", "-t", "1,2"],
                "gemv.q4_full=" + v)),
        ]
        print("| family | test | threads | unit | %s | %s | picked | picked / best |" % ("variant A", "variant B"))
        print("|---|---|---:|---|---:|---:|---|---:|")
        for fam, names, unit, fn in tests:
            a, b = fn(names[0]), fn(names[1])
            for key in sorted(a):
                if key not in b:
                    continue
                va, vb = a[key], b[key]
                p = picked.get(fam, names[0])
                vp = va if p == names[0] else vb
                print("| %s | %s | %d | %s | %s %.1f | %s %.1f | %s | %.2f |" % (
                    fam, key[0], key[1], unit, names[0], va, names[1], vb, p, vp / max(va, vb)))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
