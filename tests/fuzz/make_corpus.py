#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (small GGUF files and texts).

    python3 tests/fuzz/make_corpus.py OUTDIR

creates OUTDIR/gguf/ (seeds of fuzz_gguf) and OUTDIR/tokenizer/ (seeds of
fuzz_tokenizer: a mode byte, then a GGUF vocabulary or a text). Deterministic;
every file is at most a few kilobytes.
"""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FMT = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?",
       U64: "Q", I64: "q", F64: "d"}


def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(value(et, i) for i in items)
    return struct.pack("<" + FMT[t], v)


def gguf(kvs, tensors=(), version=3, align=32):
    """kvs: [(key, type, value)]; tensors: [(name, ne, ggml_type, data bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += s(k) + struct.pack("<I", t) + value(t, v)
    off, blobs = 0, []
    for name, ne, gt, data in tensors:
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", gt, off)
        pad = (-len(data)) % align
        blobs.append(data + b"\0" * pad)
        off += len(data) + pad
    if tensors:
        out += b"\0" * ((-len(out)) % align) + b"".join(blobs)
    return out


def spm_vocab():
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    pieces += ["\u2581", "\u2581\u2581", "e", "l", "o", "H", "w", "r", "d", "he", "ll", "llo",
               "\u2581w", "or", "ld", "Hello", "\u2581world", "<|user|>"]
    types = [2, 3, 3] + [6] * 256 + [1] * (len(pieces) - 260) + [4]
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces) - 259)]
    return gguf([("tokenizer.ggml.model", STR, "llama"), ("tokenizer.ggml.tokens", ARR, (STR, pieces)),
                 ("tokenizer.ggml.scores", ARR, (F32, scores)), ("tokenizer.ggml.token_type", ARR, (I32, types)),
                 ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2),
                 ("tokenizer.ggml.add_bos_token", BOOL, True)])


def byte_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def gpt2_vocab(pre="gpt-2"):
    bu = byte_unicode()
    pieces = [bu[b] for b in range(256)]
    merges = ["\u0120 w", "o r", "\u0120w or", "l d", "H e", "l l", "He ll", "Hell o", "\u0120wor ld"]
    for m in merges:
        pieces.append(m.replace(" ", ""))
    pieces.append("<|endoftext|>")
    types = [1] * (len(pieces) - 1) + [3]
    return gguf([("tokenizer.ggml.model", STR, "gpt2"), ("tokenizer.ggml.pre", STR, pre),
                 ("tokenizer.ggml.tokens", ARR, (STR, pieces)), ("tokenizer.ggml.token_type", ARR, (I32, types)),
                 ("tokenizer.ggml.merges", ARR, (STR, merges)),
                 ("tokenizer.ggml.eos_token_id", U32, len(pieces) - 1)])


def bert_vocab():
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "\u2581hello", "\u2581world", "\u2581!", "ing",
              "\u2581play", "\u2581caf", "e", "\u2581\u4e2d"]
    types = [3, 3, 3, 3] + [1] * (len(pieces) - 4)
    return gguf([("tokenizer.ggml.model", STR, "bert"), ("tokenizer.ggml.tokens", ARR, (STR, pieces)),
                 ("tokenizer.ggml.token_type", ARR, (I32, types)), ("tokenizer.ggml.unknown_token_id", U32, 1),
                 ("tokenizer.ggml.cls_token_id", U32, 2), ("tokenizer.ggml.seperator_token_id", U32, 3)])


def llama2c_vocab():
    """A llama2.c tokenizer.bin: <unk> <s> </s>, the 256 byte pieces, a few merges."""
    pieces = [("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0)] + [("<0x%02X>" % b, 0.0) for b in range(256)]
    pieces += [(" ", -1.0), ("e", -2.0), ("l", -3.0), ("ll", -4.0), (" H", -5.0), (" He", -6.0), ("llo", -7.0)]
    out = struct.pack("<i", 8)
    for p, sc in pieces:
        b = p.encode()
        out += struct.pack("<fi", sc, len(b)) + b
    return out


def safetensors(tensors, meta=True):
    """tensors: [(name, dtype, shape, data bytes)] -> a safetensors image."""
    import json
    hdr, off, blob = {}, 0, b""
    if meta:
        hdr["__metadata__"] = {"format": "pt"}
    for name, dt, shape, data in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blob += data
    h = json.dumps(hdr).encode()
    h += b" " * ((-len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def hf_seeds():
    """Seeds of fuzz_safetensors: mode byte 0 safetensors, 1 config.json, 2 tokenizer.json."""
    import json
    f32 = struct.pack("<6f", *range(6))
    st = {
        "st_basic": safetensors([("w", "F32", [2, 3], f32), ("b", "BF16", [2], b"\0\x3f\0\x40"),
                                 ("h", "F16", [], b"\0\x3c"), ("ids", "I64", [1, 2], b"\1" * 16)]),
        "st_empty": safetensors([], meta=False),
        "st_zero": safetensors([("z", "F32", [0, 4], b"")]),
    }
    cfg = {"model_type": "bert", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
           "num_attention_heads": 2, "vocab_size": 12, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
           "rope_scaling": {"rope_type": "linear", "factor": 2.0}, "eos_token_id": [2, 3]}
    vocab = {p: i for i, p in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "!", "##ing",
                                         "play", "caf", "##e", "\u4e2d"])}
    wp = {"version": "1.0", "added_tokens": [{"id": 0, "content": "[PAD]", "special": True}],
          "normalizer": {"type": "BertNormalizer", "lowercase": True},
          "pre_tokenizer": {"type": "BertPreTokenizer"},
          "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "vocab": vocab}}
    bu = byte_unicode()
    bvocab = {bu[b]: b for b in range(256)}
    merges = ["\u0120 w", "o r", "H e", "l l"]
    for m in merges:
        bvocab[m.replace(" ", "")] = len(bvocab)
    bpe = {"added_tokens": [{"id": len(bvocab), "content": "<|endoftext|>", "special": True}],
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Digits", "individual_digits": True}, {"type": "ByteLevel"}]},
           "model": {"type": "BPE", "vocab": bvocab, "merges": [m.split(" ") for m in merges]}}
    out = {k: b"\0" + v for k, v in st.items()}
    out["config_bert"] = b"\1" + json.dumps(cfg).encode()
    out["tok_wordpiece"] = b"\2" + json.dumps(wp).encode()
    out["tok_bpe"] = b"\2" + json.dumps(bpe).encode()
    # SentencePiece-style BPE (Llama 2 / Gemma): U+2581 spaces, byte fallback, merges
    sp = "\u2581"
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + \
        [sp, "h", "e", "l", "o", "w", "r", "d", sp + "h", "he", "ll", sp + "he", "llo", sp + "hello", "or"]
    svocab = {p: i for i, p in enumerate(pieces)}
    smerges = [sp + " h", "h e", "l l", sp + "h e", "ll o", sp + "he llo", "o r"]
    spm = {"added_tokens": [{"id": i, "content": p, "special": True} for i, p in enumerate(pieces[:3])],
           "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": sp},
                                                             {"type": "Replace", "pattern": {"String": " "},
                                                              "content": sp}]},
           "model": {"type": "BPE", "vocab": svocab, "merges": smerges, "byte_fallback": True, "unk_token": "<unk>"}}
    out["tok_spm"] = b"\2" + json.dumps(spm).encode()
    spm_meta = dict(spm)
    del spm_meta["normalizer"]
    spm_meta["pre_tokenizer"] = {"type": "Metaspace", "replacement": sp, "prepend_scheme": "first"}
    out["tok_spm_metaspace"] = b"\2" + json.dumps(spm_meta).encode()
    return out


def moe_llama():
    """A Mixtral-style Llama GGUF: width 4, 2 heads (1 KV), 2 experts of width 4, 1 used; f32."""
    def t(name, *ne):
        n = 1
        for d in ne:
            n *= d
        return (name, list(ne), 0, struct.pack("<%df" % n, *[(i % 7) * 0.25 - 0.5 for i in range(n)]))
    kvs = [("general.architecture", STR, "llama"), ("llama.context_length", U32, 16),
           ("llama.embedding_length", U32, 4), ("llama.feed_forward_length", U32, 4), ("llama.block_count", U32, 1),
           ("llama.attention.head_count", U32, 2), ("llama.attention.head_count_kv", U32, 1),
           ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5), ("llama.expert_count", U32, 2),
           ("llama.expert_used_count", U32, 1), ("llama.vocab_size", U32, 3)]
    tensors = [t("token_embd.weight", 4, 3), t("blk.0.attn_norm.weight", 4), t("blk.0.attn_q.weight", 4, 4),
               t("blk.0.attn_k.weight", 4, 2), t("blk.0.attn_v.weight", 4, 2), t("blk.0.attn_output.weight", 4, 4),
               t("blk.0.ffn_norm.weight", 4), t("blk.0.ffn_gate_inp.weight", 4, 2),
               t("blk.0.ffn_gate_exps.weight", 4, 4, 2), t("blk.0.ffn_down_exps.weight", 4, 4, 2),
               t("blk.0.ffn_up_exps.weight", 4, 4, 2), t("output_norm.weight", 4)]
    return gguf(kvs, tensors)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "fuzz-corpus"
    g_dir, t_dir = os.path.join(out, "gguf"), os.path.join(out, "tokenizer")
    os.makedirs(g_dir, exist_ok=True)
    os.makedirs(t_dir, exist_ok=True)
    f32 = struct.pack("<8f", *range(8))
    seeds = {
        "empty_v3": gguf([]),
        "empty_v2": gguf([], version=2),
        "scalars": gguf([("a.u8", U8, 7), ("a.i8", I8, -7), ("a.u16", U16, 700), ("a.i16", I16, -700),
                         ("a.u32", U32, 70000), ("a.i32", I32, -70000), ("a.f32", F32, 1.5),
                         ("a.bool", BOOL, True), ("a.str", STR, "text"), ("a.u64", U64, 1 << 40),
                         ("a.i64", I64, -(1 << 40)), ("a.f64", F64, 2.5)]),
        "arrays": gguf([("a.ints", ARR, (I32, [1, -2, 3])), ("a.strs", ARR, (STR, ["x", "", "yz"])),
                        ("a.nested", ARR, (ARR, [(U8, [1, 2]), (U8, [])])), ("a.f", ARR, (F32, [0.5]))]),
        "tensors": gguf([("general.architecture", STR, "llama")],
                        [("w", [4, 2], 0, f32), ("h", [32], 1, b"\1" * 64), ("q", [32, 2], 8, b"\2" * 68),
                         ("q4", [32], 2, b"\3" * 18), ("q41", [32], 3, b"\4" * 20), ("b", [2], 30, b"\5" * 4)]),
        "aligned64": gguf([("general.alignment", U32, 64)], [("w", [8], 0, f32)], align=64),
        "q6k": gguf([], [("k", [256], 14, b"\6" * 210)]),
        # the other types the Llama loader converts: q4_K, q5_K, q5_0, q5_1, iq4_nl, iq4_xs (scales 1.0)
        "kquants": gguf([], [("a", [256], 12, b"\0\x3c\0\x3c" + b"\7" * 140),
                             ("b", [256], 13, b"\0\x3c\0\x3c" + b"\x11" * 172),
                             ("c", [32, 2], 6, (b"\0\x3c" + b"\x22" * 20) * 2),
                             ("d", [32], 7, b"\0\x3c\0\x3c" + b"\x33" * 20),
                             ("e", [32], 20, b"\0\x3c" + b"\x44" * 16),
                             ("f", [256], 23, b"\0\x3c" + b"\x55" * 134)]),
        "moe_llama": moe_llama(),
        "vocab_spm": spm_vocab(),
        "vocab_gpt2": gpt2_vocab(),
        "vocab_bert": bert_vocab(),
    }
    for name, data in seeds.items():
        with open(os.path.join(g_dir, name), "wb") as f:
            f.write(data)
    for name in ("vocab_spm", "vocab_gpt2", "vocab_bert"):
        with open(os.path.join(t_dir, name), "wb") as f:
            f.write(b"\0" + seeds[name])
    s_dir = os.path.join(out, "safetensors")
    os.makedirs(s_dir, exist_ok=True)
    for name, data in hf_seeds().items():
        with open(os.path.join(s_dir, name), "wb") as f:
            f.write(data)
    with open(os.path.join(t_dir, "llama2c"), "wb") as f:
        f.write(b"\2" + llama2c_vocab())
    with open(os.path.join(t_dir, "vocab_smollm"), "wb") as f:
        f.write(b"\0" + gpt2_vocab("smollm"))
    with open(os.path.join(t_dir, "vocab_llama3"), "wb") as f:
        f.write(b"\0" + gpt2_vocab("llama-bpe"))
    texts = ["Hello world", " Hello, y'all! How are you \U0001F601 ?\u6211\u60f3\u5728apple\u5de5\u4f5c1314151",
             "\n \n\n \t\t\n   x", "Fa\u00e7ade na\u00efve \u00c9COLE \u0130stanbul", "3333 33.3 'RE 'll",
             "\u1780\u17b6\u1793\u17cb\u178f\u17c2 \u043d\u0435\u0449\u043e", "<s></s><|endoftext|>[CLS]",
             "C\u1eeda Vi\u1ec7t \ud55c\uad6d\uc5b4 \u00bd"]
    for i, t in enumerate(texts):
        with open(os.path.join(t_dir, "text_%d" % i), "wb") as f:
            f.write(b"\1" + t.encode("utf-8", "surrogatepass"))


if __name__ == "__main__":
    main()
