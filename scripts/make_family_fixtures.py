#!/usr/bin/env python3
"""Tiny random models of the Llama-like families loom runs, and the logits
transformers computes for them: the fixtures of tests/unit/test_families.c,
committed in tests/fixtures/families/ (CI has no torch).

    python3 scripts/make_family_fixtures.py OUT_DIR [--llama-cpp LLAMA_CPP_DIR]
    python3 scripts/make_family_fixtures.py --llama-cpp-only LLAMA_CPP_DIR FIXTURES OUT_DIR

The first form writes the fixtures (tests/fixtures/families is made with
OUT_DIR = tests/fixtures/families, without --llama-cpp: the GGUFs are not
committed); the second converts fixtures made before with llama.cpp's
converter only, into OUT_DIR/<family>.gguf (test_families runs it when
LOOM_LLAMA_CPP_DIR is set).

Needs torch, transformers and tokenizers (test-only: not dependencies of
loom). For each family (llama as the control, qwen2, qwen3, mistral, phi3,
mixtral, qwen3moe)
it writes OUT_DIR/<family>/ with

  config.json, model.safetensors   a random model of 2 layers, width 32, GQA
                                   (4 query heads of 8, 2 KV heads), FFN 64,
                                   weights stored as f16 (drawn in f32, rounded
                                   to f16, and transformers' logits computed in
                                   f32 from exactly those values), RoPE theta
                                   not 10000 (so a reader that drops
                                   rope_parameters.rope_theta fails)
  tokenizer.json, tokenizer_config.json
                                   a byte-level BPE trained here on a few
                                   sentences, ~300 tokens, ChatML specials;
                                   GPT-2's pre-tokenizer for llama, Qwen2's
                                   Split regex (digits apart) for qwen2/qwen3
  text.txt, text_ids.txt           a test text and the ids the tokenizer gives
  tokens.txt                       the test sequence: token ids, one line
  logits.f32                       transformers' logits after the last token
                                   (vocab_size little-endian f32)
  logits_full.f32                  mistral: the same without its sliding
                                   window (8 keys, a third of the sequence),
                                   which must differ (else the fixture could
                                   not catch a window ignored); llama.cpp's
                                   converter writes no window for Mistral and
                                   llama.cpp runs it with full attention, so
                                   its GGUF is checked against these
  ppl.txt, ppl.json                a text of a few sentences and the perplexity
                                   transformers gives the model on it, scored
                                   as llama.cpp's llama-perplexity scores
                                   (write_perplexity: chunks of 16 tokens, BOS
                                   first in each when the tokenizer adds one
                                   (llama's does, as Llama 3's), the second
                                   half scored; the value, its +/- error, the
                                   running values, the ids; "full": with full
                                   attention where logits_full.f32 is), for
                                   tests/cli/test_family_perplexity.sh
  llama-cpp.gguf                   with --llama-cpp: the folder converted by
                                   llama.cpp's own convert_hf_to_gguf.py (f32)

mixtral and qwen3moe are mixtures of 4 experts (FFN width 64 and 32), the
top 2 of each token, renormalised; their routers are drawn 3x larger, and
the seed is the first (of seed, seed + 1000, ...) whose routers keep every
token's second choice at least MIN_ROUTER_GAP (in logits) from the third, so
that lossy KV caches cannot switch a token's experts. About 92 KB a family (the
mixtures about 150 KB).

llama.cpp's converter names a byte-level BPE's pre-tokenizer by the hash of a
test text's tokens and refuses a vocabulary it does not know, as this trained
one is; it is told the pre-tokenizer the fixture tokenizer has ("gpt-2",
"qwen2"), and
everything else (metadata, tensor names and layouts) is its own. It imports
sentencepiece, which a BPE conversion does not use: a stub stands in when the
package is absent.

The weights are drawn larger than the models' own initialisation (which gives
nearly flat logits at this size): matrices N(0, 1/fan_in), embeddings N(0, 1),
norm weights 1 + N(0, 0.2^2), biases N(0, 0.5^2), each rounded to f16.
Everything is seeded: two runs write the same files.
"""
import copy
import importlib.machinery
import json
import math
import os
import struct
import sys
import types

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig,
                          LlamaForCausalLM, MistralConfig, MistralForCausalLM, MixtralConfig, MixtralForCausalLM,
                          Phi3Config, Phi3ForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time there was a little model that ran on a CPU.",
    "Attention is all you need, said the paper; the cache said otherwise.",
    "Qwen, Llama and friends: rotary positions, grouped queries, biases and norms.",
    "1234567890 + 987654321 = 1111111111",
]
N_TOKENS = 24
GEMMA2_QPAS = 12          # Gemma 2's q.k scale 12^-1/2, not head_dim's 8^-1/2
GEMMA2_ATTN_CAP = 2.0     # attention logit soft-cap
GEMMA2_FINAL_CAP = 20.0   # final logit soft-cap
GEMMA3_LAYERS = ["sliding_attention", "sliding_attention", "full_attention"]
WINDOW = 8  # Mistral's sliding window: the last 16 positions see only part of the sequence
PHI3_WINDOW = 12
# Qwen2's (and Qwen3's) pre-tokenizer regex, as in their tokenizer.json
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
            r"\s*[\r\n]+|\s+(?!\S)|\s+")
TEST_TEXT = ("Hello world! I'LL pay 12345 dollars, don't you?\n\n  Qwen2.5 costs 3.14 - na\u00efve caf\u00e9 "
             "\u4e2d\u6587 ok   end\r\n\tTabs and 7 8 9.")


def train_tokenizer(qwen, vocab_size=300, bos=False):
    """Trained with GPT-2's pre-tokenizer, whose digit runs give merges of
    digits; the Qwen tokenizers then split with Qwen2's regex, so a pre-
    tokenizer that kept digits together (Llama 3's) would encode differently.
    bos: the tokenizer adds <|endoftext|> as BOS, in its post-processor, as
    Llama 3's adds <|begin_of_text|> (tokenizer_config.json names bos_token
    and has no add_bos_token)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TEXT * 4, trainer)
    if qwen:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    extra = dict(bos_token="<|endoftext|>", add_bos_token=True) if bos else {}
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   chat_template=CHATML, **extra)


def config_for(family, vocab):
    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=vocab, max_position_embeddings=256, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, eos_token_id=0)
    if family == "llama":  # its tokenizer adds BOS (<|endoftext|>, id 0)
        return LlamaConfig(rope_theta=500000.0, bos_token_id=0, **common), LlamaForCausalLM
    if family == "qwen2":
        return Qwen2Config(rope_theta=1000000.0, **common), Qwen2ForCausalLM
    if family == "mistral":
        return MistralConfig(rope_theta=1000000.0, sliding_window=WINDOW, **common), MistralForCausalLM
    if family == "phi3":  # merged qkv_proj and gate_up_proj; Phi-3-mini has a window too (2047 of 4096)
        common.update(pad_token_id=None, bos_token_id=None)
        return Phi3Config(rope_theta=250000.0, sliding_window=PHI3_WINDOW, **common), Phi3ForCausalLM
    if family == "mixtral":  # 4 experts of width 64, the top 2 of each token (renormalised)
        return MixtralConfig(rope_theta=1000000.0, num_local_experts=4, num_experts_per_tok=2, **common), \
            MixtralForCausalLM
    if family == "qwen3moe":  # Qwen3's attention; 4 experts of width 32, top 2, norm_topk_prob as Qwen3-30B-A3B
        return Qwen3MoeConfig(rope_theta=1000000.0, head_dim=16, num_experts=4, num_experts_per_tok=2,
                              moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1,
                              mlp_only_layers=[], **common), Qwen3MoeForCausalLM
    if family == "gemma2":  # every other layer slides; q.k scale from query_pre_attn_scalar (not head_dim);
        # soft-caps small enough to act on these scores and logits; tied embeddings as every Gemma
        common.update(tie_word_embeddings=True, pad_token_id=None, bos_token_id=None)
        return Gemma2Config(rope_parameters={"rope_type": "default", "rope_theta": 20000.0}, head_dim=8,
                            query_pre_attn_scalar=GEMMA2_QPAS, sliding_window=WINDOW,
                            attn_logit_softcapping=GEMMA2_ATTN_CAP, final_logit_softcapping=GEMMA2_FINAL_CAP,
                            **common), Gemma2ForCausalLM
    if family == "gemma3":  # 3 layers, 2 sliding (theta 10^4) then 1 global (theta 10^6, linear scaling 2);
        # Q/K norms, explicit head_dim 16
        common.update(tie_word_embeddings=True, pad_token_id=None, bos_token_id=None, num_hidden_layers=3)
        return Gemma3TextConfig(
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
            layer_types=GEMMA3_LAYERS, head_dim=16, query_pre_attn_scalar=16, sliding_window=WINDOW,
            **common), Gemma3ForCausalLM
    # Qwen3: an explicit head_dim, 4 x 16 = 64 query dims against a width of 32
    return Qwen3Config(rope_theta=1000000.0, head_dim=16, **common), Qwen3ForCausalLM


@torch.no_grad()
def randomise(model, gen, gemma=False):
    for name, p in model.named_parameters():
        if name.endswith("norm.weight") or "layernorm" in name:  # Gemma's norms multiply by 1 + w
            p.copy_((0.0 if gemma else 1.0) + 0.2 * torch.randn(p.shape, generator=gen))
            if gemma:  # multiples of 2^-10: w and 1 + w both exact in f16 (llama.cpp's converter adds the
                # 1 to the f16 tensor, rounding 1 + w to f16, where transformers adds it in f32)
                p.copy_(torch.round(p * 1024.0) / 1024.0)
        elif name.endswith(".bias"):
            p.copy_(0.5 * torch.randn(p.shape, generator=gen))
        elif "embed_tokens" in name:
            p.copy_(torch.randn(p.shape, generator=gen))
        elif name.endswith("gate.weight") and p.shape[0] <= 16:  # MoE routers: clear top-k margins
            p.copy_(3.0 * torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
        else:  # [out, in] matrices ([experts, out, in] for stacked experts)
            p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
        p.copy_(p.to(torch.float16).to(torch.float32))  # stored as f16: exact in f32


# A mixture of experts is discontinuous: a token whose k-th and (k+1)-th router
# logits are nearly equal may switch experts under a rounding difference (an
# f16 or i8 KV cache, loom's own summation order). The fixtures keep every
# token's k-th choice at least this far (in router logits) from the next.
MIN_ROUTER_GAP = 0.1


def router_gap(model, tokens, cfg):
    """Smallest gap, over tokens and layers, between the k-th and (k+1)-th router logit (None: no experts)."""
    k = getattr(cfg, "num_experts_per_tok", None)
    if not k:
        return None
    out = model(tokens[None, :], output_router_logits=True)
    gap = float("inf")
    for rl in out.router_logits:
        s = rl.float().sort(-1, descending=True).values
        gap = min(gap, float((s[:, k - 1] - s[:, k]).min()))
    return gap
@torch.no_grad()
def variant(model, cls, cfg, tokens, **changes):
    """The last logits of the same weights under cfg with changes."""
    c2 = copy.deepcopy(cfg)
    for k, v in changes.items():
        setattr(c2, k, v)
    m2 = cls(c2).eval()
    m2.load_state_dict(model.state_dict())
    return m2(tokens[None, :]).logits[0, -1].to(torch.float32)


def write_f32(path, t):
    with open(path, "wb") as f:
        f.write(struct.pack("<%df" % t.numel(), *t.tolist()))


@torch.no_grad()
def make(family, out, tokenizer):
    seed = {"llama": 1, "qwen2": 2, "qwen3": 3, "mistral": 4, "phi3": 5, "gemma2": 6, "gemma3": 7, "mixtral": 6,
            "qwen3moe": 7}[family]
    for attempt in range(200):
        gen = torch.Generator().manual_seed(seed + 1000 * attempt)
        cfg, cls = config_for(family, len(tokenizer))
        cfg._attn_implementation = "eager"
        model = cls(cfg).eval()
        randomise(model, gen, gemma=family.startswith("gemma"))
        tokens = torch.randint(0, cfg.vocab_size, (N_TOKENS,), generator=gen)
        gap = router_gap(model, tokens, cfg)
        if gap is None or gap >= MIN_ROUTER_GAP:
            break
    else:
        sys.exit("%s: no seed gives routers whose top-k is clear of the next expert" % family)
    if gap is not None:
        print("%s: seed %d: smallest router logit gap between the last chosen and the next expert %.3f" % (
            family, seed + 1000 * attempt, gap))
    d = os.path.join(out, family)
    os.makedirs(d, exist_ok=True)
    logits = model(tokens[None, :]).logits[0, -1].to(torch.float32)
    window = getattr(cfg, "sliding_window", None)
    if window:  # the same model with full attention (the config is read per call; Gemma's
        # caches want a window: one longer than the sequence)
        if family.startswith("gemma"):
            full = variant(model, cls, cfg, tokens, sliding_window=4 * N_TOKENS)
        else:
            model.config.sliding_window = None
            full = model(tokens[None, :]).logits[0, -1].to(torch.float32)
            model.config.sliding_window = window
        diff = float((full - logits).abs().max() / logits.abs().max())
        if diff < 1e-2:
            sys.exit("%s: the window changes the logits by %.3g only: the fixture would not test it" % (family, diff))
        print("%s: sliding window %d: logits %.3g (relative) from full attention's" % (family, window, diff))
        if family == "mistral":  # llama.cpp's GGUF of it has no window (phi3's has)
            write_f32(os.path.join(d, "logits_full.f32"), full)
    if family == "gemma2":  # each soft-cap, and the scale, must matter
        for attr, off in (("attn_logit_softcapping", None), ("final_logit_softcapping", None),
                          ("query_pre_attn_scalar", cfg.head_dim)):
            other = variant(model, cls, cfg, tokens, **{attr: off})
            diff = float((other - logits).abs().max() / logits.abs().max())
            if diff < 1e-2:
                sys.exit("gemma2: %s changes the logits by %.3g only" % (attr, diff))
            print("gemma2: %s: logits %.3g (relative) from the model without it" % (attr, diff))
        # llama.cpp's GGUF of it scales q.k by 1/sqrt(head_dim) and has no rope.freq_base (10000: the
        # converter writes none for Gemma 2)
        lc = variant(model, cls, cfg, tokens, query_pre_attn_scalar=cfg.head_dim,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
        write_f32(os.path.join(d, "logits_llama_cpp.f32"), lc)
    if family == "gemma3":  # llama.cpp's converter writes no layer pattern and llama.cpp takes 6 (5 sliding,
        # 1 global): with 3 layers every layer slides; its GGUF is checked against that model
        lc = variant(model, cls, cfg, tokens, layer_types=["sliding_attention"] * 3)
        diff = float((lc - logits).abs().max() / logits.abs().max())
        if diff < 1e-2:
            sys.exit("gemma3: the global layer changes the logits by %.3g only" % diff)
        print("gemma3: all layers sliding (llama.cpp's reading): logits %.3g (relative) from the model's" % diff)
        write_f32(os.path.join(d, "logits_llama_cpp.f32"), lc)
    model.to(torch.float16).save_pretrained(d, safe_serialization=True)
    save_tokenizer(tokenizer, d, family)
    with open(os.path.join(d, "tokens.txt"), "w") as f:
        f.write(" ".join(str(int(t)) for t in tokens) + "\n")
    write_f32(os.path.join(d, "logits.f32"), logits)
    with open(os.path.join(d, "text.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(TEST_TEXT)
    with open(os.path.join(d, "text_ids.txt"), "w") as f:
        f.write(" ".join(str(i) for i in tokenizer.encode(TEST_TEXT, add_special_tokens=False)) + "\n")
    with open(os.path.join(d, "config.json")) as f:
        rope = json.load(f).get("rope_parameters")
    print("%s: %s, vocab %d, rope_parameters %s, max |logit| %.3f" % (
        family, d, cfg.vocab_size, rope, float(logits.abs().max())))


PPL_CTX = 16  # tokens per chunk of the perplexity fixture (the second half scored)
PPL_TEXT = ("The quick brown fox jumps over the lazy dog. Once upon a time there was a little model that ran "
            "on a CPU.\nQwen, Llama and friends: rotary positions, grouped queries, biases and norms; the lazy dog "
            "said 1234567890 + 987654321 = 1111111111.\n")


@torch.no_grad()
def perplexity(model, tokenizer, text, ctx, bos_first=True):
    """The perplexity of the model on text as llama.cpp's llama-perplexity
    scores it (tools/perplexity/perplexity.cpp, perplexity()): the text,
    without its last newline (as -f reads a file), tokenized once with the
    tokenizer's special tokens (BOS when it adds one), cut into the
    len // ctx full chunks of ctx tokens, each chunk's first token replaced
    by BOS when the tokenizer adds BOS, run from position 0, and token j+1
    scored from the logits at j for j = ctx/2 .. ctx-2 (bos_first=False:
    the chunks as cut, to show that BOS matters); PPL = exp(mean NLL),
    error = PPL * sqrt((mean(NLL^2) - mean(NLL)^2) / (count - 1)); the
    running PPL after each chunk."""
    if text.endswith("\n"):  # llama.cpp's -f (and loom's) drops the file's last newline
        text = text[:-1]
    ids = tokenizer(text)["input_ids"]
    plain = tokenizer(text, add_special_tokens=False)["input_ids"]
    add_bos = len(ids) == len(plain) + 1 and ids[0] == tokenizer.bos_token_id
    if ids[len(ids) - len(plain):] != plain or len(ids) - len(plain) not in (0, 1) or len(ids) < 2 * ctx:
        sys.exit("perplexity: the tokenizer adds more than BOS, or the text is shorter than two chunks")
    nll, nll2, count, running = 0.0, 0.0, 0, []
    for c in range(len(ids) // ctx):
        chunk = list(ids[c * ctx:(c + 1) * ctx])
        if add_bos and bos_first:
            chunk[0] = tokenizer.bos_token_id
        logp = torch.log_softmax(model(torch.tensor([chunk])).logits[0].to(torch.float64), dim=-1)
        for j in range(ctx // 2, ctx - 1):
            v = -float(logp[j, chunk[j + 1]])
            nll, nll2, count = nll + v, nll2 + v * v, count + 1
        running.append(math.exp(nll / count))
    mean, var = nll / count, nll2 / count - (nll / count) ** 2
    return dict(ids=ids, add_bos=add_bos, ppl=math.exp(mean), error=math.sqrt(var / (count - 1)) * math.exp(mean),
                running=running, scored=count)


def write_perplexity(d, ctx=PPL_CTX, text=PPL_TEXT):
    """ppl.txt (the text) and ppl.json (ctx, the token ids, add_bos, the
    scored count, ppl, error, running) for the fixture folder d, the model read
    back from its files in f32 as loom reads them. A folder with
    logits_full.f32 (a window llama.cpp's GGUF does not have) also gets
    "full": the same scores with full attention, which must differ by 1 %;
    a tokenizer that adds BOS must change the result by 1e-3 (else a BOS
    ignored would pass)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    res = perplexity(model, tokenizer, text, ctx)
    out = dict(ctx=ctx, n_tokens=len(res["ids"]), add_bos=res["add_bos"], bos=tokenizer.bos_token_id,
               scored=res["scored"], ppl=res["ppl"], error=res["error"], running=res["running"], ids=res["ids"])
    if res["add_bos"]:
        diff = abs(perplexity(model, tokenizer, text, ctx, bos_first=False)["ppl"] / res["ppl"] - 1)
        if diff < 1e-3:
            sys.exit("%s: BOS first in each chunk changes the perplexity by %.3g only" % (d, diff))
        print("%s: BOS first in each chunk: perplexity %.3g (relative) from the chunks as cut" % (d, diff))
    if os.path.exists(os.path.join(d, "logits_full.f32")):
        window = model.config.sliding_window
        model.config.sliding_window = None
        full = perplexity(model, tokenizer, text, ctx)
        model.config.sliding_window = window
        diff = abs(full["ppl"] / res["ppl"] - 1)
        if diff < 1e-2:
            sys.exit("%s: the window changes the perplexity by %.3g only" % (d, diff))
        out["full"] = dict(ppl=full["ppl"], error=full["error"], running=full["running"])
    with open(os.path.join(d, "ppl.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(text)
    with open(os.path.join(d, "ppl.json"), "w") as f:  # a key a line
        f.write("{\n%s\n}\n" % ",\n".join(" %s: %s" % (json.dumps(k), json.dumps(v)) for k, v in out.items()))
    print("%s: perplexity -c %d: %d tokens%s, PPL = %.4f +/- %.5f%s" % (
        d, ctx, len(res["ids"]), " (BOS added)" if res["add_bos"] else "", res["ppl"], res["error"],
        ", full attention %.4f" % out["full"]["ppl"] if "full" in out else ""))


def llama_cpp_convert(llama_cpp, model_dir, outfile, pre, outtype="f32", extra=()):
    """Runs llama.cpp's convert_hf_to_gguf.py (in this process: see the module
    doc) with --outtype outtype and the extra arguments (bench/bench_families.py
    uses both)."""
    sys.path[:0] = [llama_cpp, os.path.join(llama_cpp, "gguf-py")]
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        stub = types.ModuleType("sentencepiece")
        stub.SentencePieceProcessor = object
        stub.__spec__ = importlib.machinery.ModuleSpec("sentencepiece", None)
        sys.modules["sentencepiece"] = stub
    import convert_hf_to_gguf
    from conversion import base, gemma
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
    # Gemma 2's converter reads only a SentencePiece tokenizer.model; the fixture has the trained
    # byte-level BPE, which it is told to read as Gemma 3's converter reads one without tokenizer.model
    gemma.Gemma2Model.set_vocab = lambda self: self._set_vocab_gpt2()
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outfile", outfile, "--outtype", outtype] + list(extra)
    try:
        convert_hf_to_gguf.main()
    finally:
        sys.argv = argv


FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "phi3", "gemma2", "gemma3", "mixtral", "qwen3moe")
QWEN_TOKENIZER = ("qwen2", "qwen3", "qwen3moe")
BOS_TOKENIZER = ("llama",)  # tokenizers that add BOS
PRE = {"llama": "gpt-2", "qwen2": "qwen2", "qwen3": "qwen2", "mistral": "gpt-2", "phi3": "gpt-2", "gemma2": "gpt-2",
       "gemma3": "gpt-2", "mixtral": "gpt-2", "qwen3moe": "qwen2"}  # the tokenizers' pre-tokenizers


def save_tokenizer(tokenizer, d, family):
    """Saves tokenizer into folder d; for phi3 under the class llama.cpp's phi3
    converter reads a byte-level BPE with (Phi-4's GPT2Tokenizer)."""
    tokenizer.save_pretrained(d)
    if family == "phi3":
        path = os.path.join(d, "tokenizer_config.json")
        with open(path) as f:
            tc = json.load(f)
        tc["tokenizer_class"] = "GPT2Tokenizer"
        with open(path, "w") as f:
            json.dump(tc, f, indent=2)


def main():
    args = sys.argv[1:]
    usage = ("usage: make_family_fixtures.py OUT_DIR [--llama-cpp LLAMA_CPP_DIR]\n"
             "       make_family_fixtures.py --llama-cpp-only LLAMA_CPP_DIR FIXTURES OUT_DIR")
    if len(args) == 4 and args[0] == "--llama-cpp-only":
        for family in FAMILIES:
            llama_cpp_convert(args[1], os.path.join(args[2], family), os.path.join(args[3], family + ".gguf"),
                              PRE[family])
        return
    llama_cpp = None
    if len(args) == 3 and args[1] == "--llama-cpp":
        llama_cpp = args[2]
    elif len(args) != 1:
        sys.exit(usage)
    torch.manual_seed(0)
    for family in FAMILIES:
        make(family, args[0], train_tokenizer(qwen=family in QWEN_TOKENIZER, bos=family in BOS_TOKENIZER))
    for family in FAMILIES:
        write_perplexity(os.path.join(args[0], family))
    for family in FAMILIES if llama_cpp else ():
        d = os.path.join(args[0], family)
        llama_cpp_convert(llama_cpp, d, os.path.join(d, "llama-cpp.gguf"), PRE[family])


if __name__ == "__main__":
    main()
