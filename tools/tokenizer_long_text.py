#!/usr/bin/env python3
"""Reference ids for long texts, for the hostile-input tests of the C++ tokenizers.

tests/hostile/tokenizer_hostile_test.cc encodes a 1 MiB word without spaces (the letters of
tests/data/kjv_heldout.txt, lowercased and repeated) and compares the count and FNV-1a hash of the
ids with the numbers this script prints:
  - Kimi format: what Kimi's tokenization_kimi.py encode() returns, i.e. tiktoken over the
    pieces it cuts the text into (every 400,000 characters, then wherever a run of whitespace or
    of non-whitespace characters, by str.isspace, passes 25,000);
  - GLM format: Hugging Face tokenizers' encode with tokenizer.json.
With --files it prints the same for arbitrary text files (llm-bench-style checks of other long
inputs against the references).

usage: python3 tools/tokenizer_long_text.py [--files FILE...]
Pinned: tiktoken 0.14.0, tokenizers 0.23.3 (as tools/make_tokenizer_golden.py).
"""
import base64
import json
import os
import sys

import tiktoken
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "tests", "data")
KIMI_MAX_ENCODE_CHARS = 400_000
KIMI_MAX_RUN_CHARS = 25_000


def fnv1a(ids):
    h = 1469598103934665603
    for i in ids:
        h = ((h ^ (i & 0xFFFFFFFF)) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def kimi_encoding(d):
    cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
    ranks = {}
    for line in open(os.path.join(d, "tiktoken.model")):
        b64, r = line.split()
        ranks[base64.b64decode(b64)] = int(r)
    specials = {v["content"]: int(k) for k, v in cfg["added_tokens_decoder"].items()}
    return tiktoken.Encoding(name="kimi-kjv", pat_str=cfg["pat_str"], mergeable_ranks=ranks, special_tokens=specials)


def kimi_pieces(text):
    """The pieces tokenization_kimi.py hands to tiktoken, in order."""
    for start in range(0, len(text), KIMI_MAX_ENCODE_CHARS):
        segment = text[start:start + KIMI_MAX_ENCODE_CHARS]
        piece_start, run, run_is_space = 0, 0, None
        for i, ch in enumerate(segment):
            space = ch.isspace()
            if space != run_is_space:
                run, run_is_space = 1, space
            else:
                run += 1
                if run > KIMI_MAX_RUN_CHARS:
                    yield segment[piece_start:i]
                    piece_start, run = i, 1
        yield segment[piece_start:]


def kimi_encode(enc, text):
    ids = []
    for piece in kimi_pieces(text):
        ids += enc.encode(piece, allowed_special="all")
    return ids


def mib_word():
    letters = "".join(c for c in open(os.path.join(DATA, "kjv_heldout.txt")).read().lower() if "a" <= c <= "z")
    while len(letters) < (1 << 20):
        letters += letters
    return letters[:1 << 20]


def main():
    kimi = kimi_encoding(os.path.join(DATA, "tokenizers", "kimi"))
    glm = Tokenizer.from_file(os.path.join(DATA, "tokenizers", "glm", "tokenizer.json"))
    if len(sys.argv) > 2 and sys.argv[1] == "--files":
        texts = [(f, open(f, "rb").read().decode("utf-8", "replace")) for f in sys.argv[2:]]
    else:
        texts = [("1 MiB word", mib_word())]
    for name, text in texts:
        k = kimi_encode(kimi, text)
        g = glm.encode(text).ids
        print(f"{name}: kimi {len(k)} ids fnv 0x{fnv1a(k):016x}; glm {len(g)} ids fnv 0x{fnv1a(g):016x}")


if __name__ == "__main__":
    main()
