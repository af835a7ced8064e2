#!/usr/bin/env python3
"""Reference tokenizations for the C++ tokenizers, from the reference libraries themselves.

Copies the trained tokenizer files (tools/train_tokenizer.py output) to tests/data/tokenizers/ and
writes tests/data/tokenizers/golden.json: for every test string, the ids tiktoken gives with the
Kimi-format files (encode with all specials allowed, and encode_ordinary) and the ids Hugging Face
tokenizers gives with the GLM tokenizer.json. Strings with invalid UTF-8 are given as bytes; the
reference sees bytes.decode("utf-8", errors="replace"), which is what llmrt does with such input.

usage: python3 tools/make_tokenizer_golden.py TOKENIZER_DIR CORPUS_DIR
Pinned: tiktoken 0.14.0, tokenizers 0.23.3.
Also copies the held-out text to tests/data/kjv_heldout.txt (the evaluation file llm-eval uses).
"""
import base64
import json
import os
import shutil
import sys

import tiktoken
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "data", "tokenizers")

TRICKY = [
    "", " ", "a", "In the beginning God created the heaven and the earth.",
    "你好世界，我爱编程。", "GPT模型is good很好", "東京タワーへ行きました", "한국어 텍스트",
    "👨‍👩‍👧‍👦 family 🎉🎉", "e\u0301te\u0301 vs \u00e9t\u00e9", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "1234567 3.14159 12,345 ٣٤٥ ⅷ", "a   b\t\tc\n\n\nd  ", "  leading and trailing  ", "\n\n\n",
    "I'm can't we'll they've He'd SHE'S it'LL", "HelloWorld iPhone XMLHttpRequest CamelCaseWord",
    "<|im_end|>hi<|im_user|>user<|im_middle|>text", "[gMASK]<sop><|user|>\nhello<|assistant|>",
    "<think>reason</think>answer", "\u00a0non\u2003breaking\u3000space", "line1\r\nline2\r\n\r\n",
    "a" * 40, "!!!???...;;;---", "Σίσυφος Ελληνικά Ünïcödé", "tab\there", "x" + "\u200b" * 3 + "y",
    "The LORD is my shepherd; I shall not want.", "(For the life was manifested)",
    "emoji at end 🙂", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math", "\U0001F600\U0001F601", "'s 's 'S", "   ", "a\u0300\u0301\u0302",
]
TRICKY_BYTES = [b"abc\xff\xfedef", b"\xe2\x82", b"\xc3(", b"ok\xf0\x90\x80", b"\xed\xa0\x80x", b"\xf4\x90\x80\x80"]


def load_kimi(d):
    cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
    ranks = {}
    for line in open(os.path.join(d, "tiktoken.model")):
        b64, r = line.split()
        ranks[base64.b64decode(b64)] = int(r)
    specials = {v["content"]: int(k) for k, v in cfg["added_tokens_decoder"].items()}
    return tiktoken.Encoding(name="kimi-kjv", pat_str=cfg["pat_str"], mergeable_ranks=ranks, special_tokens=specials)


def main():
    tok_dir, corpus = sys.argv[1], sys.argv[2]
    for fam, files in (("kimi", ["tiktoken.model", "tokenizer_config.json"]), ("glm", ["tokenizer.json", "tokenizer_config.json"])):
        os.makedirs(os.path.join(OUT, fam), exist_ok=True)
        for f in files:
            shutil.copy(os.path.join(tok_dir, fam, f), os.path.join(OUT, fam, f))
    kimi = load_kimi(os.path.join(tok_dir, "kimi"))
    glm = Tokenizer.from_file(os.path.join(tok_dir, "glm", "tokenizer.json"))
    heldout = open(os.path.join(corpus, "heldout.txt")).read()
    cases = []
    inputs = [(s, s.encode("utf-8")) for s in TRICKY] + [(b.decode("utf-8", "replace"), b) for b in TRICKY_BYTES]
    inputs += [(line + "\n", (line + "\n").encode()) for line in heldout.splitlines()[:40]]
    for text, raw in inputs:
        cases.append({
            "hex": raw.hex(),
            "kimi": kimi.encode(text, allowed_special="all"),
            "kimi_ordinary": kimi.encode_ordinary(text),
            "glm": glm.encode(text).ids,
        })
    shutil.copy(os.path.join(corpus, "heldout.txt"), os.path.join(OUT, "..", "kjv_heldout.txt"))
    cases.append({"file": "kjv_heldout.txt", "kimi": kimi.encode(heldout, allowed_special="all"),
                  "kimi_ordinary": kimi.encode_ordinary(heldout), "glm": glm.encode(heldout).ids})
    json.dump({"tiktoken": tiktoken.__version__, "tokenizers": __import__("tokenizers").__version__,
               "cases": cases}, open(os.path.join(OUT, "golden.json"), "w"))
    print(f"{len(cases)} cases; held-out text: {len(cases[-1]['kimi'])} Kimi tokens, {len(cases[-1]['glm'])} GLM tokens")


if __name__ == "__main__":
    main()
