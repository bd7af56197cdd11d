#!/usr/bin/env python3
"""A Llama-shaped model of random weights, for benchmarks of real layer shapes
on a machine that cannot hold the real model: a Hugging Face folder
(config.json, model.safetensors) that loom loads as it is or after
`loom convert`.

    python3 bench/make_llama_shaped.py OUT_DIR [--shape llama2-7b] [--layers 2]
                                       [--dtype f16|bf16|f32] [--vocab N] [--seed S]

Shapes: llama2-7b (dim 4096, FFN 11008, 32 heads, MHA), llama3-8b (4096,
14336, 32 heads, 8 KV heads), llama3.2-1b (2048, 8192, 32 heads of 64, 8 KV
heads). Weights N(0, 1/fan_in), norms 1 + N(0, 0.1^2),
so activations stay in range through the layers. Needs numpy only.
"""
import argparse
import json
import os
import struct

import numpy as np

SHAPES = {
    "llama2-7b": dict(hidden_size=4096, intermediate_size=11008, num_attention_heads=32, num_key_value_heads=32,
                      rope_theta=10000.0, vocab_size=32000, rms_norm_eps=1e-5),
    "llama3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8,
                        rope_theta=500000.0, vocab_size=128256, rms_norm_eps=1e-5),
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                      rope_theta=500000.0, vocab_size=128256, rms_norm_eps=1e-5),
}
DT = {"f16": (np.float16, "F16", "float16"), "bf16": (None, "BF16", "bfloat16"), "f32": (np.float32, "F32", "float32")}


def to_bytes(a, dtype):
    if dtype == "bf16":  # round to nearest even on the top 16 bits
        u = a.astype(np.float32).view(np.uint32)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        return u.tobytes()
    return a.astype(DT[dtype][0]).tobytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shape", default="llama2-7b", choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dtype", default="f16", choices=sorted(DT))
    ap.add_argument("--vocab", type=int, default=0, help="vocabulary size (default: the shape's)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    cfg = dict(SHAPES[a.shape])
    if a.vocab:
        cfg["vocab_size"] = a.vocab
    cfg.update(architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=a.layers,
               max_position_embeddings=4096, hidden_act="silu", tie_word_embeddings=False,
               torch_dtype=DT[a.dtype][2], bos_token_id=1, eos_token_id=2)
    d, f, h, kv = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, V = d // h, cfg["vocab_size"]
    rng = np.random.default_rng(a.seed)
    tensors = []  # (name, shape, generator)

    def mat(rows, cols):
        return lambda: (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(np.float32)

    def norm(n):
        return lambda: (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)

    tensors.append(("model.embed_tokens.weight", (V, d), lambda: rng.standard_normal((V, d), dtype=np.float32)))
    for i in range(a.layers):
        p = f"model.layers.{i}."
        tensors += [(p + "input_layernorm.weight", (d,), norm(d)),
                    (p + "self_attn.q_proj.weight", (h * hd, d), mat(h * hd, d)),
                    (p + "self_attn.k_proj.weight", (kv * hd, d), mat(kv * hd, d)),
                    (p + "self_attn.v_proj.weight", (kv * hd, d), mat(kv * hd, d)),
                    (p + "self_attn.o_proj.weight", (d, h * hd), mat(d, h * hd)),
                    (p + "post_attention_layernorm.weight", (d,), norm(d)),
                    (p + "mlp.gate_proj.weight", (f, d), mat(f, d)),
                    (p + "mlp.up_proj.weight", (f, d), mat(f, d)),
                    (p + "mlp.down_proj.weight", (d, f), mat(d, f))]
    tensors += [("model.norm.weight", (d,), norm(d)), ("lm_head.weight", (V, d), mat(V, d))]
    esize = 4 if a.dtype == "f32" else 2
    header, off = {}, 0
    for name, shape, _ in tensors:
        n = int(np.prod(shape)) * esize
        header[name] = {"dtype": DT[a.dtype][1], "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hj = json.dumps(header).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as fp:
        json.dump(cfg, fp, indent=1)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as fp:
        fp.write(struct.pack("<Q", len(hj)))
        fp.write(hj)
        for name, shape, gen in tensors:
            fp.write(to_bytes(gen(), a.dtype))
    print(f"{a.out}: {a.shape} with {a.layers} layers, {a.dtype}, {off / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
