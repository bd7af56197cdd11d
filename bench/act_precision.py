#!/usr/bin/env python3
"""Speed of the two activation precisions (q8 and full, docs/models.md) with `loom bench`.

For each model (default: SmolLM2-135M-Instruct Q4_1 from scripts/fetch-models.sh and
its Q8_0 conversion, made here with `loom convert --type q8_0`), each mode and each
round, one `loom bench -p 512 -n 128 -t THREADS --act-precision ...` run measures both
precisions in the same process (their order alternating between rounds, so drift hits
both alike). Printed: a Markdown table with the median over rounds of each precision's
median tokens/s and of the per-round ratio full / q8, with its range; above it the
command, the CPU and the load average, so the table can go to bench/results/ as is.

    bench/act_precision.py [--loom build/loom] [--model M.gguf]... [--rounds 3] [--reps 5]
                           [--threads 1,2] [--modes fused,step_by_step] [--no-q8-0]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_line():
    name, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and name == "unknown CPU":
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    want = ["avx2", "avx512f", "avx512_vnni", "avx512_bf16"]
    return "%s, %d logical CPUs; %s" % (name, os.cpu_count() or 0,
                                        ", ".join(f for f in want if f in flags) or "no AVX2")


def run_bench(loom, model, threads, mode, acts, reps):
    cmd = [loom, "bench", "-m", model, "-p", "512", "-n", "128", "-t", threads, "--mode", mode,
           "--act-precision", acts, "-r", str(reps), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)  # one object per test, llama-bench's field names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loom", default=os.path.join(HERE, "..", "build", "loom"))
    ap.add_argument("--model", action="append", help="GGUF model (repeatable)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--modes", default="fused,step_by_step")
    ap.add_argument("--no-q8-0", action="store_true", help="skip the Q8_0 conversion of the first model")
    a = ap.parse_args()
    models_dir = os.environ.get("LOOM_MODELS_DIR", os.path.expanduser("~/.cache/loom/models"))
    models = a.model or [os.path.join(models_dir, "SmolLM2-135M-Instruct.Q4_1.gguf")]
    tmp = tempfile.mkdtemp(prefix="loom-act-")
    if not a.no_q8_0:
        q8 = os.path.join(tmp, os.path.basename(models[0]).replace(".gguf", "") + ".q8_0.gguf")
        subprocess.run([a.loom, "convert", models[0], q8, "--type", "q8_0"], check=True, capture_output=True)
        models.append(q8)

    load0 = os.getloadavg()
    t0 = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs = {}    # (model, mode, threads, test) -> {"q8": [...], "full": [...], "ratio": [...]}
    for r in range(a.rounds):
        acts = "q8,full" if r % 2 == 0 else "full,q8"
        for model in models:
            for mode in a.modes.split(","):
                res = run_bench(a.loom, model, a.threads, mode, acts, a.reps)
                by = {}
                for x in res:
                    test = ("pp%d" % x["n_prompt"]) if x["n_prompt"] else ("tg%d" % x["n_gen"])
                    by[(x["n_threads"], test, x["act_precision"])] = x["median_ts"]
                for (th, test, act), tps in by.items():
                    e = runs.setdefault((os.path.basename(model), mode, th, test), {"q8": [], "full": [], "ratio": []})
                    e[act].append(tps)
                    if act == "full" and (th, test, "q8") in by:
                        e["ratio"].append(tps / by[(th, test, "q8")])
                print("round %d/%d %s %s done" % (r + 1, a.rounds, os.path.basename(model), mode), file=sys.stderr)
    load1 = os.getloadavg()

    print("`%s`, %d rounds of `loom bench -p 512 -n 128 -t %s --act-precision q8,full -r %d --mode MODE --json`"
          " (order alternating), %s" % (" ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]), a.rounds, a.threads,
                                       a.reps, t0))
    print()
    print("CPU: %s. Load average %.1f at the start, %.1f at the end (the machine is shared)." %
          (cpu_line(), load0[0], load1[0]))
    print()
    print("| model | mode | threads | test | q8 t/s | full t/s | full / q8 | range of the ratio |")
    print("|---|---|---:|---|---:|---:|---:|---|")
    for key in sorted(runs, key=lambda k: (k[0], k[1], k[3], k[2])):
        e = runs[key]
        if not e["q8"] or not e["full"] or not e["ratio"]:
            continue
        print("| %s | %s | %d | %s | %.1f | %.1f | %.3f | %.3f .. %.3f |" % (
            key[0], key[1], key[2], key[3], statistics.median(e["q8"]), statistics.median(e["full"]),
            statistics.median(e["ratio"]), min(e["ratio"]), max(e["ratio"])))


if __name__ == "__main__":
    main()
