#!/usr/bin/env python3
"""Agreement of loom's activation precisions with transformers' f32 run of the same weights.

The reference is Hugging Face transformers running, in float32, the f32 dequantization
of the default chat model (`loom convert MODEL.Q4_1.gguf OUT.gguf --type f32`, which
transformers loads through its GGUF support). For 20 chat prompts (the model's chat
template applied by transformers' tokenizer, so both sides start from the same ids),
the first N = 32 greedy tokens of transformers are compared with loom's
(bench/greedy_tokens) with --act-precision q8 and full, and with loom's reference
kernels (LOOM_ISA=ref: f64 sums, x exact; a check of the set-up). Exactly N tokens are
generated on every side (no stop at the end-of-turn token); argmax takes the lowest id
on ties on every side.

Printed (Markdown, for bench/results/): per configuration the prompts whose 32 tokens
all agree, the tokens that agree position by position, and the mean length of the
common prefix (up to the first differing token); then per prompt the common prefixes
and the texts. Run in a virtual environment outside the repository:

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers gguf numpy accelerate
    /tmp/venv/bin/python bench/check_act_precision.py [--build build] [--model Q4_1.gguf]
        [--f32 /tmp/s.f32.gguf] [-n 32] [-t 2] [--mode step_by_step]
"""
import argparse
import os
import subprocess
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))

PROMPTS = [
    "What is the capital of France?",
    "What is the capital of Japan?",
    "Name three primary colors.",
    "How many legs does a spider have?",
    "Write a haiku about the sea.",
    "Explain photosynthesis in one sentence.",
    "What is 12 times 7?",
    "Give me a synonym for happy.",
    "Who wrote Romeo and Juliet?",
    "Translate 'good morning' into Spanish.",
    "What is the boiling point of water in Celsius?",
    "Suggest a name for a pet goldfish.",
    "Why is the sky blue?",
    "List the days of the week.",
    "What does a bee make?",
    "Write a Python function that adds two numbers.",
    "What is the largest planet in our solar system?",
    "Give one tip for sleeping better.",
    "What language is spoken in Brazil?",
    "Describe a cat in five words.",
]


def hf_greedy(model, ids, n):
    out, past = [], None
    inp = torch.tensor([ids])
    with torch.no_grad():
        for _ in range(n):
            r = model(input_ids=inp, past_key_values=past, use_cache=True)
            past = r.past_key_values
            nxt = int(torch.argmax(r.logits[0, -1]))  # first maximum: the lowest id on ties
            out.append(nxt)
            inp = torch.tensor([[nxt]])
    return out


def loom_greedy(exe, model, prompts, n, threads, mode, act, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    cmd = [exe, "-m", model, "-n", str(n), "-t", str(threads), "--mode", mode, "--act-precision", act]
    text = "".join(" ".join(map(str, p)) + "\n" for p in prompts)
    out = subprocess.run(cmd, input=text, capture_output=True, text=True, check=True, env=env).stdout
    return [list(map(int, line.split())) for line in out.strip().split("\n")]


def prefix(a, b):
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def short(tok, ids, n=70):
    s = tok.decode(ids).replace("\n", "\\n").replace("|", "\\|")
    return s if len(s) <= n else s[:n] + "…"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    models_dir = os.environ.get("LOOM_MODELS_DIR", os.path.expanduser("~/.cache/loom/models"))
    ap.add_argument("--model", default=os.path.join(models_dir, "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--f32", default="/tmp/s.f32.gguf", help="the f32 dequantization (made if missing)")
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--mode", default="step_by_step")
    a = ap.parse_args()
    loom = os.path.join(a.build, "loom")
    exe = os.path.join(a.build, "bench", "greedy_tokens")
    if not os.path.exists(a.f32):
        subprocess.run([loom, "convert", a.model, a.f32, "--type", "f32"], check=True)
    torch.set_num_threads(a.threads)
    d, f = os.path.split(os.path.abspath(a.f32))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
               for q in PROMPTS]
    prompts = [list(p["input_ids"]) if hasattr(p, "keys") else list(p) for p in prompts]
    t0 = time.time()
    ref = [hf_greedy(model, p, a.n) for p in prompts]
    t_hf = time.time() - t0
    runs = [("q8", loom_greedy(exe, a.model, prompts, a.n, a.threads, a.mode, "q8")),
            ("full", loom_greedy(exe, a.model, prompts, a.n, a.threads, a.mode, "full")),
            ("reference kernels (LOOM_ISA=ref)",
             loom_greedy(exe, a.model, prompts, a.n, a.threads, a.mode, "full", {"LOOM_ISA": "ref"}))]

    print("`%s` (%s UTC); transformers %s, torch %s (float32, %.0f s); loom: `%s -m %s -n %d -t %d --mode %s`"
          % (" ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]), time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
             __import__("transformers").__version__, torch.__version__, t_hf, os.path.relpath(exe),
             os.path.basename(a.model), a.n, a.threads, a.mode))
    print()
    print("Reference: transformers on `%s` (the f32 dequantization of `%s`). %d chat prompts, %d greedy tokens each."
          % (os.path.basename(a.f32), os.path.basename(a.model), len(prompts), a.n))
    print()
    print("| loom activations | prompts with all %d tokens equal | tokens equal (position by position) "
          "| mean common prefix |" % a.n)
    print("|---|---:|---:|---:|")
    total = len(prompts) * a.n
    for name, got in runs:
        full_eq = sum(1 for g, r in zip(got, ref) if g == r)
        pos_eq = sum(sum(1 for x, y in zip(g, r) if x == y) for g, r in zip(got, ref))
        mean_pre = sum(prefix(g, r) for g, r in zip(got, ref)) / len(prompts)
        print("| %s | %d / %d | %d / %d (%.1f %%) | %.1f |" % (name, full_eq, len(prompts), pos_eq, total,
                                                            100.0 * pos_eq / total, mean_pre))
    print()
    print("| # | prompt | common prefix q8 / full | transformers | loom q8 | loom full |")
    print("|---:|---|---|---|---|---|")
    for i, q in enumerate(PROMPTS):
        print("| %d | %s | %d / %d | %s | %s | %s |" % (i + 1, q, prefix(runs[0][1][i], ref[i]),
                                                       prefix(runs[1][1][i], ref[i]), short(tok, ref[i]),
                                                       short(tok, runs[0][1][i]), short(tok, runs[1][1][i])))


if __name__ == "__main__":
    main()
