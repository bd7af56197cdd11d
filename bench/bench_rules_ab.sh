#!/usr/bin/env bash
# Two fusion rule files against each other: `loom bench` medians in
# interleaved rounds (ABBA order: the first run of a round is often the
# slowest) so that machine drift hits both alike; ratio new / old.
#   bench/bench_rules_ab.sh LOOM MODEL OLD_RULES NEW_RULES THREADS PROMPTS GEN ROUNDS REPS
# OLD_RULES or NEW_RULES "" = the built-in rules. PROMPTS 0 or GEN 0: that test only.
# LOOM_OLD=PATH: the old side runs that binary instead of LOOM (two builds against
# each other, e.g. the commit before a change: LOOM_OLD=/tmp/old/build/loom
# bench/bench_rules_ab.sh build/loom MODEL "" "" 1,2 512 64 4 3).
# AB_ARGS="...": more `loom bench` arguments for both sides (e.g. "-np 16 -d 128");
# OLD_ENV="VAR=value ...": environment of the old side only (e.g. "LOOM_PACK_WEIGHTS=0":
# the weights not packed, against the default).
# e.g. the ffn's one pass for decode (new) against the default two kernels (old):
#   sed 's/one_pass_rows: auto/one_pass_rows: 7/' configs/fusion/default.yaml > /tmp/one.yaml
#   bench/bench_rules_ab.sh build/loom MODEL.gguf "" /tmp/one.yaml 1,2 0 64 6 3
set -euo pipefail
LOOM=${1:?loom binary} MODEL=${2:?model} OLD=${3?old rules} NEW=${4?new rules}
THREADS=${5:-2} PROMPTS=${6:-512} GEN=${7:-64} ROUNDS=${8:-3} REPS=${9:-3}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$ROUNDS"); do
    order="new old"
    [ $((r % 2)) = 0 ] && order="old new"
    for v in $order; do
        f=$NEW bin=$LOOM
        [ "$v" = old ] && f=$OLD bin=${LOOM_OLD:-$LOOM}
        rules=()
        [ -n "$f" ] && rules=(--rules "$f")
        envs=()
        [ "$v" = old ] && [ -n "${OLD_ENV:-}" ] && read -r -a envs <<<"$OLD_ENV"
        # shellcheck disable=SC2086 # AB_ARGS is split into arguments on purpose
        env ${envs[@]+"${envs[@]}"} "$bin" bench -m "$MODEL" -t "$THREADS" -p "$PROMPTS" -n "$GEN" -r "$REPS" -o jsonl \
            ${AB_ARGS:-} ${rules[@]+"${rules[@]}"} \
            | sed "s/^{/{\"variant\":\"$v\",\"round\":$r,/" >>"$tmp/all.jsonl"
    done
done
python3 - "$tmp/all.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
key = lambda d: (d["n_threads"], d["n_prompt"], d["n_gen"], d.get("n_parallel", 1), d.get("n_depth", 0))
tests = sorted({key(d) for d in rows})
print("| test | threads | np | depth | old tok/s (median) | new tok/s (median) | new / old | min .. max of the rounds' ratios |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for t in tests:
    med = {v: statistics.median(d["avg_ts"] for d in rows if key(d) == t and d["variant"] == v) for v in ("old", "new")}
    per = {}
    for d in rows:
        if key(d) == t: per.setdefault(d["round"], {})[d["variant"]] = d["avg_ts"]
    ratios = [p["new"] / p["old"] for p in per.values() if len(p) == 2]
    name = f"pp{t[1]}" if t[1] else f"tg{t[2]}"
    print(f"| {name} | {t[0]} | {t[3]} | {t[4]} | {med['old']:.2f} | {med['new']:.2f} | {med['new'] / med['old']:.3f} | "
          f"{min(ratios):.3f} .. {max(ratios):.3f} |")
PY
