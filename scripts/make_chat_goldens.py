#!/usr/bin/env python3
"""Renders the chat-template goldens of tests/unit/test_chat_families.c.

For every folder tests/fixtures/chat/FAMILY/ (a tokenizer_config.json carrying a
model's real chat_template, bos_token and eos_token, as the model's Hugging Face
repository has them) this renders a few conversations with transformers'
apply_chat_template and writes FAMILY/renders.txt, which the C test renders
again with loom and compares byte for byte. Needs transformers (not a loom
dependency); the goldens are committed so that the test runs without it.

    python scripts/make_chat_goldens.py [tests/fixtures/chat]

renders.txt is a sequence of cases, each:
    case NAME ADD_GENERATION_PROMPT N_MESSAGES
    ROLE LEN\n<LEN bytes of content>\n          (N_MESSAGES times)
    render LEN\n<LEN bytes of the rendering>\n
or, where the template raises an exception (Gemma 2's refuses a system message),
    refused LEN\n<LEN bytes of its message>\n
"""
import jinja2
import json
import os
import sys

from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

SYS = "You are a concise assistant."
CASES = [
    ("user_only", True, [("user", "Hello!")]),
    ("system_user", True, [("system", SYS), ("user", "What is 2+2?")]),
    ("multi_turn", True, [("user", "Hi there"), ("assistant", "Hello! How can I help?"),
                          ("user", "Name a colour.")]),
    ("multi_turn_system", True, [("system", SYS), ("user", "Hi there"),
                                 ("assistant", "Hello! How can I help?"), ("user", "Name a colour.")]),
    # whitespace the templates treat differently (trim, strip or as is), newlines and UTF-8
    ("whitespace", True, [("system", "  Be kind.\n"), ("user", "  Two\nlines, Ünïcode ✓  "),
                          ("assistant", "  Sure.  \n"), ("user", "\tAgain \n")]),
    ("ends_with_reply", False, [("user", "Hi"), ("assistant", "Hello!")]),
    ("ends_with_reply_system", False, [("system", SYS), ("user", "Hi"), ("assistant", "Hello!")]),
]


def tokenizer_for(cfg):
    tok = Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>"))
    kw = {k: cfg[k] for k in ("bos_token", "eos_token") if cfg.get(k) is not None}
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", **kw)


def block(out, head, text):
    b = text.encode("utf-8")
    out += f"{head} {len(b)}\n".encode() + b + b"\n"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests",
                                                             "fixtures", "chat")
    for fam in sorted(os.listdir(root)):
        path = os.path.join(root, fam, "tokenizer_config.json")
        if not os.path.isfile(path):
            continue
        cfg = json.load(open(path, encoding="utf-8"))
        tok = tokenizer_for(cfg)
        out = bytearray()
        for name, gen, msgs in CASES:
            conv = [{"role": r, "content": c} for r, c in msgs]
            try:
                text, head = tok.apply_chat_template(conv, chat_template=cfg["chat_template"], tokenize=False,
                                                     add_generation_prompt=gen), "render"
            except jinja2.exceptions.TemplateError as e:  # the template refuses the conversation (Gemma 2: a system message)
                text, head = str(e), "refused"
            out += f"case {name} {int(gen)} {len(msgs)}\n".encode()
            for r, c in msgs:
                block(out, r, c)
            block(out, head, text)
        with open(os.path.join(root, fam, "renders.txt"), "wb") as f:
            f.write(out)
        print(f"{fam}: {len(CASES)} cases")


if __name__ == "__main__":
    main()
