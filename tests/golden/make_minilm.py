#!/usr/bin/env python3
"""Writes the golden all-MiniLM-L6-v2 sentence embeddings that
tests/cli/test_embed_golden.sh compares `loom embed` against.

Run by hand (not in CI), in a virtual environment outside the repository:

    python3 -m venv /tmp/st && /tmp/st/bin/pip install torch sentence-transformers
    /tmp/st/bin/python tests/golden/make_minilm.py [MODEL_DIR]

MODEL_DIR defaults to ${LOOM_MODELS_DIR:-~/.cache/loom/models}/all-MiniLM-L6-v2 (as unpacked by
scripts/fetch-models.sh). Reads tests/golden/minilm_sentences.txt (one sentence per line) and
writes tests/golden/minilm_embeddings.tsv: one line per sentence, 384 tab-separated floats, the
output of SentenceTransformer(MODEL_DIR).encode(sentences) (mean pooling, L2-normalised), on CPU
in float32.
"""
import os
import sys

import torch
from sentence_transformers import SentenceTransformer

here = os.path.dirname(os.path.abspath(__file__))
default = os.path.join(os.environ.get("LOOM_MODELS_DIR") or os.path.expanduser("~/.cache/loom/models"),
                       "all-MiniLM-L6-v2")
model_dir = sys.argv[1] if len(sys.argv) > 1 else default
with open(os.path.join(here, "minilm_sentences.txt"), encoding="utf-8") as f:
    sentences = [line.rstrip("\n") for line in f]
torch.set_grad_enabled(False)
model = SentenceTransformer(model_dir, device="cpu")
emb = model.encode(sentences, batch_size=len(sentences), convert_to_numpy=True, normalize_embeddings=False)
with open(os.path.join(here, "minilm_embeddings.tsv"), "w") as f:
    for v in emb:
        f.write("\t".join("%.8g" % x for x in v) + "\n")
print("wrote %d embeddings of %d dims" % emb.shape)
