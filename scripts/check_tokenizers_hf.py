#!/usr/bin/env python3
"""Compares `loom tokenize` with the reference tokenizers on random strings.

    python3 -m pip install tokenizers sentencepiece     # into a virtualenv; not a loom dependency
    python3 scripts/check_tokenizers_hf.py build/loom [--shared ../shared] [-n 300] [--seed 1]

References: Hugging Face `tokenizers` built from the GGUF vocabularies of ../shared/vocab (GPT-2 with
the gpt-2, smollm and llama-bpe pre-tokenizers; BERT WordPiece with BertNormalizer) and `sentencepiece`
with ../shared/models/llama2-tokenizer/tokenizer.model for the llama-spm vocabulary. Run by hand, not in
CI. Prints the mismatches and a count per tokenizer; exits 1 on any mismatch.
"""
import argparse
import os
import random
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "fuzz"))
import make_corpus as mc  # noqa: E402  (GGUF writer)

from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers  # noqa: E402
import sentencepiece as spm  # noqa: E402

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
POOLS = ["abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " ", "  ", "\t", "\n", "\r\n",
         "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'RE", "'", "\"", ".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`",
         "éèêëàâäôöùûüçñÉÀÇÑßøåæœ", "нещоБългарски", "中文字符我想在工作天", "한국어", "\u0301\u0308\u0327",
         "ខ្មែរ", "🦙🚀😀✅", "\u200d", "\ufe0f", "\u00a0", "\u2000\u3000\u2028\u0085", "١٢٣½Ⅻ²", "\u00ad",
         "ǅǈ", "ﬁ", "İı", "Σσς", "ｆｕｌｌ", "\x01\x07\x1f", "\u2581", "𝔘𝔫𝔦", "\ue000", "\uf9c4"]


def read_gguf(path):
    d = open(path, "rb").read()
    pos = 24
    _, nk = struct.unpack_from("<QQ", d, 8)

    def rstr():
        nonlocal pos
        (n,) = struct.unpack_from("<Q", d, pos)
        pos += 8 + n
        return d[pos - n:pos]

    def val(t):
        nonlocal pos
        if t == mc.STR:
            return rstr()
        if t == mc.ARR:
            et, n = struct.unpack_from("<IQ", d, pos)
            pos += 12
            return (et, [val(et) for _ in range(n)])
        fmt = "<" + mc.FMT[t]
        pos += struct.calcsize(fmt)
        return struct.unpack_from(fmt, d, pos - struct.calcsize(fmt))[0]

    kvs = []
    for _ in range(nk):
        k = rstr().decode()
        (t,) = struct.unpack_from("<I", d, pos)
        pos += 4
        kvs.append((k, t, val(t)))
    return kvs


def rand_text(rng):
    parts = []
    for _ in range(rng.randint(1, 12)):
        p = rng.choice(POOLS)
        parts.append(p[:rng.randint(1, 4)] if rng.random() < 0.5 else p)
    return "".join(parts)


def loom_ids(loom, gguf, text):
    r = subprocess.run([loom, "tokenize", "-z", gguf, "-p", text, "--no-bos", "--no-eos"],
                       capture_output=True, text=True)
    return [int(x) for x in r.stdout.split()] if r.returncode == 0 else "error: " + r.stderr.strip()


def compare(name, loom, gguf, ref, texts):
    bad = 0
    for t in texts:
        want, got = ref(t), loom_ids(loom, gguf, t)
        if want != got:
            bad += 1
            if bad <= 5:
                print("%s: %r\n  reference %s\n  loom      %s" % (name, t, want, got))
    print("%-10s %d / %d equal" % (name, len(texts) - bad, len(texts)))
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("loom")
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    texts = [rand_text(rng) for _ in range(a.n)]
    voc = os.path.join(a.shared, "vocab")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        kv = read_gguf(os.path.join(voc, "ggml-vocab-gpt-2.gguf"))
        d = {k: v for k, _, v in kv}
        toks = [x.decode() for x in d["tokenizer.ggml.tokens"][1]]
        merges = [tuple(x.decode().split(" ", 1)) for x in d["tokenizer.ggml.merges"][1]]
        vocab = {t: i for i, t in reversed(list(enumerate(toks)))}
        for pre in ("gpt-2", "smollm", "llama-bpe"):
            path = os.path.join(tmp, pre + ".gguf")
            with open(path, "wb") as f:
                f.write(mc.gguf([(k, t, pre.encode() if k == "tokenizer.ggml.pre" else v) for k, t, v in kv]))
            hf = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=pre == "llama-bpe"))
            bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pre != "llama-bpe")
            if pre == "smollm":
                hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bl])
            elif pre == "llama-bpe":
                hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), "isolated"), bl])
            else:
                hf.pre_tokenizer = bl
            bad += compare(pre, a.loom, path, lambda t: hf.encode(t, add_special_tokens=False).ids, texts)

    path = os.path.join(voc, "ggml-vocab-bert-bge.gguf")
    d = {k: v for k, _, v in read_gguf(path)}
    hv = {}
    for i, (t, ty) in enumerate(zip(d["tokenizer.ggml.tokens"][1], d["tokenizer.ggml.token_type"][1])):
        t = t.decode()
        hv.setdefault(t if ty == 3 else t[1:] if t.startswith("\u2581") else "##" + t, i)
    bert = Tokenizer(models.WordPiece(vocab=hv, unk_token="[UNK]", max_input_chars_per_word=100))
    bert.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True)
    bert.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    bad += compare("bert", a.loom, path, lambda t: bert.encode(t, add_special_tokens=False).ids, texts)

    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.shared, "models", "llama2-tokenizer",
                                                            "tokenizer.model"))
    bad += compare("llama-spm", a.loom, os.path.join(voc, "ggml-vocab-llama-spm.gguf"), sp.encode, texts)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
