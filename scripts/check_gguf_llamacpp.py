#!/usr/bin/env python3
"""Checks that GGUF files written by `loom convert` load in llama.cpp (run by hand; needs the
`gguf` and `llama-cpp-python` packages in a virtual environment outside the repository).

    python3 scripts/check_gguf_llamacpp.py [--prompt TEXT] [--ids 1,403,407] FILE.gguf...

For each file: the `gguf` reader lists tensors and keys, llama.cpp evaluates the token ids and
prints the argmax per position and the greedy completion of the prompt. With two or more files the
maximum logit difference of each against the first is printed (0 for the same weights converted
from different sources, e.g. llama2.c and a Hugging Face folder)."""
import argparse

import numpy as np
from gguf import GGUFReader
from llama_cpp import Llama

ap = argparse.ArgumentParser()
ap.add_argument("files", nargs="+")
ap.add_argument("--prompt", default="Once upon a time")
ap.add_argument("--ids", default="1,403,407,261,378,290")
ap.add_argument("-n", type=int, default=30)
a = ap.parse_args()
ids = [int(x) for x in a.ids.split(",")]
first = None
for f in a.files:
    r = GGUFReader(f)
    types = sorted({t.tensor_type.name for t in r.tensors})
    print("%s: gguf reader: %d tensors (%s), %d keys" % (f, len(r.tensors), ", ".join(types), len(r.fields)))
    m = Llama(model_path=f, n_ctx=max(64, len(ids) + a.n + 16), logits_all=True, verbose=False, n_threads=1)
    m.eval(ids)
    lg = np.array(m.scores[:len(ids)])
    print("  llama.cpp argmax per position:", lg.argmax(1).tolist())
    out = m.create_completion(a.prompt, max_tokens=a.n, temperature=0.0, top_k=1)
    print("  llama.cpp greedy:", repr(a.prompt + out["choices"][0]["text"]))
    if first is None:
        first = lg
    else:
        print("  max |logit - first file's|: %.6g" % float(np.abs(lg - first).max()))
