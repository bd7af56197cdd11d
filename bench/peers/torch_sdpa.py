#!/usr/bin/env python3
"""Times torch.nn.functional.scaled_dot_product_attention on the prefill shapes
of bench_attention and prints the ratio against loom's fused kernel.

torch is a benchmark-only peer, never a dependency of loom: install it into a
virtual environment outside the repository, e.g.
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch
and run this script with that interpreter. Without torch it says so and exits 0.

loom's numbers come from the '@prefill ...' lines of `bench_attention --machine`:
either this script runs the binary (--loom PATH, extra arguments after --) or
reads a saved output (--from FILE). Each row is timed here with the same shape
(B=1, N heads, N_kv kv heads, S, D, causal), dtype and thread count
(torch.set_num_threads), median of --reps runs after a warm-up. When loom's
rows were timed with --cpu-time, 1-thread rows here use this thread's CPU time.

    torch_sdpa.py --loom build-attn-bench/bench/bench_attention [--reps 5] -- --threads 1,2
    torch_sdpa.py --from saved_output.txt
"""
import argparse
import statistics
import subprocess
import sys
import time


def parse_rows(text):
    rows = []
    for line in text.splitlines():
        if not line.startswith("@prefill "):
            continue
        kv = dict(item.split("=", 1) for item in line.split()[1:])
        rows.append(kv)
    return rows


def time_sdpa(torch, row, reps, cpu_time):
    S, N, Nkv, D = (int(row[k]) for k in ("S", "N", "Nkv", "D"))
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[row["dtype"]]
    torch.set_num_threads(int(row["threads"]))
    g = torch.Generator().manual_seed(0)
    q = (torch.rand(1, N, S, D, generator=g) * 2 - 1).to(dtype)
    k = (torch.rand(1, Nkv, S, D, generator=g) * 2 - 1).to(dtype)
    v = (torch.rand(1, Nkv, S, D, generator=g) * 2 - 1).to(dtype)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    try:
        sdpa(q[:, :, :8], k[:, :, :8], v[:, :, :8], is_causal=True, enable_gqa=True)

        def call():
            return sdpa(q, k, v, is_causal=True, enable_gqa=True)
    except TypeError:  # torch < 2.5: expand the kv heads (inside the timing)
        def call():
            rep = N // Nkv
            return sdpa(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), is_causal=True)
    # one thread runs inline on this thread: its CPU time matches loom's --cpu-time rows
    clock = time.thread_time if cpu_time and int(row["threads"]) == 1 else time.perf_counter
    with torch.inference_mode():
        call()
        times = []
        for _ in range(reps):
            t0 = clock()
            call()
            times.append(clock() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loom", help="path of bench_attention to run")
    ap.add_argument("--from", dest="src", help="saved output of bench_attention --machine")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("rest", nargs="*", help="extra bench_attention arguments (after --)")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_sdpa: torch is not importable; nothing to compare (benchmark-only peer)")
        return 0
    if a.src:
        with open(a.src) as f:
            text = f.read()
    elif a.loom:
        cmd = [a.loom, "--machine", "--sets", "prefill"] + a.rest
        text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    else:
        ap.error("give --loom PATH or --from FILE")
    rows = parse_rows(text)
    # f32hp (loom's inner_precise 1: bf16 products for f32 inputs) has no torch CPU counterpart
    if any(r["dtype"] == "f32hp" for r in rows):
        print("torch_sdpa: skipping the f32hp rows (torch's CPU SDPA has no bf16-product mode "
              "for f32 inputs)", file=sys.stderr)
    rows = [r for r in rows if r["dtype"] in ("f32", "bf16")]
    cpu_time = "thread CPU time" in text  # bench_attention --cpu-time: 1-thread rows by CPU time
    if not rows:
        print("torch_sdpa: no '@prefill' lines in loom's output", file=sys.stderr)
        return 1
    print(f"torch {torch.__version__}; SDPA is_causal=True; median of {a.reps} after a warm-up"
          + ("; 1-thread rows: thread CPU time (as loom's)" if cpu_time else "") + "\n")
    print("| dtype | S | N/N_kv | threads | loom fused ms | torch SDPA ms | torch/loom time | loom unfused ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        t = time_sdpa(torch, r, a.reps, cpu_time)
        lf = float(r["fused_ms"])
        print(f"| {r['dtype']} | {r['S']} | {r['N']}/{r['Nkv']} | {r['threads']} | {lf:.2f} | "
              f"{t * 1e3:.2f} | **{t * 1e3 / lf:.2f}×** | {float(r['unfused_ms']):.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
