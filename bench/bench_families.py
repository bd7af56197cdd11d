#!/usr/bin/env python3
"""Prefill and decode speed of loom against llama.cpp on a mid-size random
model of each family, the same GGUF file for both (bench/results/families.md).

    PY bench/bench_families.py [--families llama,qwen2,...] [--types f16,q8_0,q4_0]
                               [--threads 1,2] [--reps 5] [--out DIR] [--only-make]

PY: a Python with torch, transformers and tokenizers (not loom dependencies).
For each family it makes, once, in --out (default ~/.cache/loom/bench-families,
outside the repository):
  <family>/hf/             a random model with transformers (shapes in SHAPE and
                           FAMILIES: width 1024, 12 layers, 16 query heads of
                           64, 4 KV heads, FFN 2816, vocabulary 32000, untied
                           output; about 200M parameters; Gemma 2 and 3 and
                           Qwen3-MoE in their own proportions, below), saved in f16, with
                           the trained byte-level BPE of the family fixtures
                           (scripts/make_family_fixtures.py), which llama.cpp's
                           converter pads to the vocabulary with [PADn] tokens
  <family>/<family>-f16.gguf, -q8_0.gguf
                           written by llama.cpp's convert_hf_to_gguf.py
                           (--outtype f16, q8_0)
                           (only the types --types asks for)
  <family>/<family>-q4_0.gguf
                           `loom convert` of the f16 file (llama.cpp's
                           converter writes no q4_0, and llama-quantize is not
                           built here)
then runs, on each file, one tool after the other under one hold of the
exclusive lock (/tmp/loom-bench.lock, flock(2) as `flock` takes it):
  loom bench  -m FILE -p 512 -n 128 -t THREADS -r REPS --kv-dtype f16 -o json
  llama-bench -m FILE -p 512 -n 128 -t THREADS -r REPS -o json    (f16 KV, its default)
and prints a markdown table: median tokens/s of both, and loom / llama.cpp.
The raw JSON goes to --out/results-<time>.json.

Environment: LOOM (default build/loom), LLAMA_CPP_SRC (a llama.cpp source tree
with convert_hf_to_gguf.py; default the one bench/peers/llama_cpp.sh unpacks,
/tmp/loom-peer-llama-cpp/src/vendor/llama.cpp), LLAMA_BENCH (default
LLAMA_CPP_SRC/build/bin/llama-bench).

Adding a family: an entry in FAMILIES (its transformers config class, model
class, the pre-tokenizer name llama.cpp is told, whether its tokenizer is
Qwen2's, and the keys that differ from SHAPE).
"""
import argparse
import fcntl
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))

SHAPE = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12, num_attention_heads=16,
             num_key_value_heads=4, head_dim=64, vocab_size=32000, max_position_embeddings=4096,
             rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=None, eos_token_id=0, pad_token_id=None)

# family: (config class, model class, pre-tokenizer for llama.cpp's converter, Qwen2 tokenizer, changes to SHAPE)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", "gpt-2", False, dict(rope_theta=500000.0)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", "qwen2", True, dict(rope_theta=1000000.0)),
    # Qwen3-0.6B's attention: 16 query heads and 8 KV heads of 128 on a width of 1024
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", "qwen2", True,
              dict(rope_theta=1000000.0, head_dim=128, num_key_value_heads=8, intermediate_size=3072)),
    "mistral": ("MistralConfig", "MistralForCausalLM", "gpt-2", False,
                dict(rope_theta=1000000.0, sliding_window=4096)),
    # Phi-3-mini's window (2047; longer than the tests, so it changes no work)
    "phi3": ("Phi3Config", "Phi3ForCausalLM", "gpt-2", False, dict(rope_theta=10000.0, sliding_window=2047)),
    # Gemma 2 (2B's proportions): 4 query heads and 2 KV heads of 256 on a width of 1024, GeGLU FFN 4096,
    # q.k scaled by query_pre_attn_scalar 256, soft-caps 50 (attention) and 30 (logits), every other
    # layer sliding with Gemma 2's window of 4096 (longer than the tests), tied embeddings
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", "gpt-2", False,
               dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, head_dim=256,
                    num_attention_heads=4, num_key_value_heads=2, intermediate_size=4096,
                    query_pre_attn_scalar=256, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                    sliding_window=4096, tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh")),
    # Gemma 3 (1B's proportions): 4 query heads and 1 KV head of 256, Q/K norms, GeGLU FFN 4096, window 512,
    # 5 sliding layers (theta 10^4) then 1 global (theta 10^6), tied embeddings
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", "gpt-2", False,
               dict(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                    head_dim=256, num_attention_heads=4, num_key_value_heads=1, intermediate_size=4096,
                    query_pre_attn_scalar=256, sliding_window=512, tie_word_embeddings=True,
                    layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 2,
                    hidden_activation="gelu_pytorch_tanh")),
    # Qwen3-MoE (Qwen3-30B-A3B's layout, smaller): Qwen3's attention (16 query heads and 4 KV heads of 128,
    # Q/K norms), every layer a mixture of 8 experts of width 768, top 2 renormalised
    "qwen3moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", "qwen2", True,
                 dict(rope_theta=1000000.0, head_dim=128, num_experts=8, num_experts_per_tok=2,
                      moe_intermediate_size=768, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[])),
}


def make_model(family, d):
    """The random Hugging Face folder of a family, once."""
    if os.path.exists(os.path.join(d, "model.safetensors")) or os.path.exists(
            os.path.join(d, "model.safetensors.index.json")):
        return
    import torch
    import transformers
    import make_family_fixtures as fx
    cfg_name, cls_name, _, qwen_tok, changes = FAMILIES[family]
    shape = dict(SHAPE, **changes)
    cfg = getattr(transformers, cfg_name)(**shape)
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(cfg).eval()  # the model's own initialisation
    n = sum(p.numel() for p in model.parameters())
    os.makedirs(d, exist_ok=True)
    model.to(torch.float16).save_pretrained(d, safe_serialization=True)
    tok = fx.train_tokenizer(qwen=qwen_tok)
    fx.save_tokenizer(tok, d, family)  # as in the fixtures (phi3: the class llama.cpp reads a BPE under)
    print("%s: %s, %.1fM parameters" % (family, d, n / 1e6), file=sys.stderr)


def run(cmd, **kw):
    print("+ " + " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


# Gemma 3's converter cuts token_embd to the tokenizer's own tokens (300 here; the real Gemma 3 files
# have 64 unused rows past their vocabulary) while the vocabulary it writes is padded to vocab_size
# with [PADn]: a file neither engine loads. The bench keeps the 32000 rows, as the other families'
# files have (the embedding rows are not transformed: Gemma 3's norm shift is for norms only).
GEMMA3_KEEP_VOCAB = (
    "import types; sys.modules.setdefault('sentencepiece', types.ModuleType('sentencepiece')); "
    "sys.modules['sentencepiece'].SentencePieceProcessor = object; "
    "import importlib.machinery; sys.modules['sentencepiece'].__spec__ = "
    "importlib.machinery.ModuleSpec('sentencepiece', None); "
    "sys.path[:0] = [%r, %r]; from conversion import gemma, base; "
    "orig = gemma.Gemma3Model.modify_tensors; "
    "gemma.Gemma3Model.modify_tensors = lambda self, t, name, bid: ("
    "base.TextModel.modify_tensors(self, t, name, bid) if 'embed_tokens.weight' in name "
    "else orig(self, t, name, bid)); ")


def convert(family, d, lc_src, loom, types=("f16", "q8_0", "q4_0")):
    """The GGUF files of the family in the given types, once: {type: path}
    (q4_0 is made from the f16 file)."""
    hf = os.path.join(d, "hf")
    make_model(family, hf)
    files = {}
    for outtype in ("f16", "q8_0"):
        if outtype not in types and not (outtype == "f16" and "q4_0" in types):
            continue
        out = os.path.join(d, "%s-%s.gguf" % (family, outtype))
        if not os.path.exists(out):
            # in a child process (the converter keeps state); the model name must not say
            # "phi3": llama.cpp then expects Phi-3's own special tokens in the vocabulary
            code = ("import sys; sys.path.insert(0, %r); import make_family_fixtures as fx; %s"
                    "fx.llama_cpp_convert(%r, %r, %r, %r, %r, ['--model-name', 'bench model'])" % (
                        os.path.join(REPO, "scripts"), GEMMA3_KEEP_VOCAB % (lc_src, os.path.join(lc_src, "gguf-py")) if family == "gemma3" else "",
                        lc_src, hf, out + ".tmp", FAMILIES[family][2], outtype))
            run([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.rename(out + ".tmp", out)
        files[outtype] = out
    if "q4_0" not in types:
        return files
    out = os.path.join(d, "%s-q4_0.gguf" % family)
    if not os.path.exists(out):
        run([loom, "convert", files["f16"], out + ".tmp", "--type", "q4_0"], stdout=subprocess.DEVNULL)
        os.rename(out + ".tmp", out)
    files["q4_0"] = out
    return files


def bench(loom, llama_bench, path, threads, reps):
    """{(engine, test, threads): (median t/s, samples)} for one file: both
    tools, one after the other, under one hold of the exclusive lock (taken
    as `flock /tmp/loom-bench.lock CMD` takes it: flock(2))."""
    with open("/tmp/loom-bench.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return bench_locked(loom, llama_bench, path, threads, reps)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def bench_locked(loom, llama_bench, path, threads, reps):
    res = {}
    out = run([loom, "bench", "-m", path, "-p", "512", "-n", "128", "-t", threads, "-r", str(reps),
                      "--kv-dtype", "f16", "-o", "json"], stdout=subprocess.PIPE, text=True).stdout
    rows = json.loads(out)
    for r in rows:
        test = "pp%d" % r["n_prompt"] if r["n_prompt"] else "tg%d" % r["n_gen"]
        res[("loom", test, r["n_threads"])] = (r["median_ts"], r["samples_ts"])
    out = run([llama_bench, "-m", path, "-p", "512", "-n", "128", "-t", threads, "-r", str(reps),
                      "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    for r in json.loads(out):
        test = "pp%d" % r["n_prompt"] if r["n_prompt"] else "tg%d" % r["n_gen"]
        ts = r.get("samples_ts") or [r["avg_ts"]]
        res[("llama.cpp", test, r["n_threads"])] = (statistics.median(ts), ts)
    return res, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--types", default="f16,q8_0,q4_0")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=os.path.expanduser("~/.cache/loom/bench-families"))
    ap.add_argument("--only-make", action="store_true", help="make the models and files, measure nothing")
    a = ap.parse_args()
    if os.path.realpath(a.out).startswith(os.path.realpath(REPO) + os.sep):
        sys.exit("bench_families: --out must be outside the repository")
    loom = os.path.abspath(os.environ.get("LOOM", os.path.join(REPO, "build", "loom")))
    lc_src = os.environ.get("LLAMA_CPP_SRC", "/tmp/loom-peer-llama-cpp/src/vendor/llama.cpp")
    llama_bench = os.environ.get("LLAMA_BENCH", os.path.join(lc_src, "build", "bin", "llama-bench"))
    for f in a.families.split(","):
        if f not in FAMILIES:
            sys.exit("bench_families: unknown family %r (known: %s)" % (f, ", ".join(FAMILIES)))
    table, raw = [], []
    files = {f: convert(f, os.path.join(a.out, f), lc_src, loom, a.types.split(",")) for f in a.families.split(",")}
    if a.only_make:
        return
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for t in a.types.split(","):  # every family in one type, then the next type
        for family in a.families.split(","):
            res, rows = bench(loom, llama_bench, files[family][t], a.threads, a.reps)
            model = "%s %s" % (rows[0]["model_type"], rows[0].get("model_size", ""))
            raw.append(dict(family=family, type=t, file=files[family][t], loom_model=rows[0]["model_type"],
                            results={"%s %s t%d" % k: v for k, v in res.items()}))
            for th in [int(x) for x in a.threads.split(",")]:
                for test in ("pp512", "tg128"):
                    lo, lc = res[("loom", test, th)][0], res[("llama.cpp", test, th)][0]
                    table.append((family, t, test, th, lo, lc, rows[0]["model_type"]))
            print("%s %s done (%s)" % (family, t, model), file=sys.stderr)
            with open(os.path.join(a.out, "results-%s.json" % stamp), "w") as f:  # so far
                json.dump(raw, f, indent=1)
            for family_, t_, test, th, lo, lc, _ in table[-2 * len(a.threads.split(",")):]:
                print("| %s | %s | %s | %d | %.2f | %.2f | %.2f |" % (family_, t_, test, th, lo, lc, lo / lc),
                      file=sys.stderr)
    print("| family | weights | test | threads | loom t/s | llama.cpp t/s | loom / llama.cpp |")
    print("|---|---|---|---:|---:|---:|---:|")
    for family, t, test, th, lo, lc, _ in table:
        print("| %s | %s | %s | %d | %.2f | %.2f | %.2f |" % (family, t, test, th, lo, lc, lo / lc))


if __name__ == "__main__":
    main()
