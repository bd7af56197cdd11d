#!/usr/bin/env python3
"""Golden logits for SmolLM2-135M-Instruct from the reference implementation.

Loads the SAME GGUF file loom runs (SmolLM2-135M-Instruct.Q4_1.gguf from
scripts/fetch-models.sh) with Hugging Face transformers, which dequantizes
every tensor to float32 (and undoes llama.cpp's Q/K row permutation), runs
fixed prompts in float32 and writes, per prompt, the token ids and for every
position the reference top-1 token and the TOPK largest logits.

Run by hand, not in CI, in a virtual environment outside the repository:
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers gguf numpy accelerate
    /tmp/venv/bin/python tests/golden/make_smollm2.py [MODEL.gguf] [OUT.txt]

tests/unit/test_golden_smollm2.c compares loom against the output
(tests/golden/smollm2_q4_1.txt).
"""
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

TOPK = 32
PROMPTS = [
    "The capital of France is",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n    if n < 2:",
]


def main():
    default = os.path.join(os.environ.get("LOOM_MODELS_DIR", os.path.expanduser("~/.cache/loom/models")),
                           "SmolLM2-135M-Instruct.Q4_1.gguf")
    path = sys.argv[1] if len(sys.argv) > 1 else default
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "smollm2_q4_1.txt")
    d, f = os.path.split(os.path.abspath(path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32)
    model.eval()
    lines = [
        "# SmolLM2-135M-Instruct.Q4_1.gguf dequantized to f32, run by transformers %s, torch %s"
        % (__import__("transformers").__version__, torch.__version__),
        "# written by tests/golden/make_smollm2.py; per prompt: 'prompt N id...', then per position",
        "# 'pos I top1 ID lse LSE' and TOPK lines 'ID LOGIT' (largest first)",
        "topk %d" % TOPK,
    ]
    with torch.no_grad():
        for text in PROMPTS:
            ids = tok(text, add_special_tokens=False)["input_ids"]
            logits = model(torch.tensor([ids])).logits[0].float()
            lines.append("# %r" % text)
            lines.append("prompt %d %s" % (len(ids), " ".join(map(str, ids))))
            for i in range(len(ids)):
                row = logits[i]
                vals, idx = torch.topk(row, TOPK)
                lse = torch.logsumexp(row.double(), 0).item()
                lines.append("pos %d top1 %d lse %.6f" % (i, int(idx[0]), lse))
                for v, j in zip(vals.tolist(), idx.tolist()):
                    lines.append("%d %.5f" % (j, v))
    with open(out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("wrote", out, os.path.getsize(out), "bytes")


if __name__ == "__main__":
    main()
