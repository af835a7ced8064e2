#!/usr/bin/env python3
"""Encoding speed of the reference libraries on a text file, for comparison with
`llm-bench --tokenize DIR --text FILE` (same file, best of N, MB/s of input text, one thread).

usage: python3 tools/tokenizer_speed.py TOKENIZERS_DIR TEXT_FILE [--repeats 5]
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizers import Tokenizer  # noqa: E402
from train_model import load_encoding  # noqa: E402


def best(fn, reps):
    t = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def main():
    d, path = sys.argv[1], sys.argv[2]
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    text = open(path, encoding="utf-8").read()
    nbytes = len(text.encode())
    kimi = load_encoding(os.path.join(d, "kimi"))
    glm = Tokenizer.from_file(os.path.join(d, "glm", "tokenizer.json"))
    print("| library | bytes | tokens | encode MB/s |\n|---|---:|---:|---:|")
    t = best(lambda: kimi.encode_ordinary(text), reps)
    print(f"| tiktoken (Kimi format) | {nbytes} | {len(kimi.encode_ordinary(text))} | {nbytes / t / 1e6:.2f} |")
    t = best(lambda: glm.encode(text), reps)
    print(f"| tokenizers (GLM format) | {nbytes} | {len(glm.encode(text).ids)} | {nbytes / t / 1e6:.2f} |")


if __name__ == "__main__":
    main()
