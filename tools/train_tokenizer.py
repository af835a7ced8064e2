#!/usr/bin/env python3
"""Trains a byte-level BPE on the KJV training split and writes it in both families' formats.

One set of merges, ranked in merge order, two packagings:
  - Kimi: tiktoken.model (one "base64(token bytes) rank" per line; bytes 0..255 first, then
    merged tokens in merge order), Kimi's pre-tokenizer regex, 256 special slots after the
    ranks with Kimi's names at Kimi's offsets, and tokenizer_config.json (added_tokens_decoder).
  - GLM: tokenizer.json (HF BPE model with the same ranks as ids, the glm4 Split pre-tokenizer +
    ByteLevel, GLM's special tokens appended).
Training uses HF tokenizers with the glm4 pre-tokenizer (docs/models.md, section 5).

usage: python3 tools/train_tokenizer.py CORPUS_DIR OUT_DIR [--ranks 3840]
Pinned: tokenizers 0.23.3, tiktoken (for the check at the end).
"""
import argparse
import base64
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

KIMI_PAT = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
GLM_PAT = (r"""(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
           r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

# Kimi K2: 256 special slots after the ranks; named ones at these offsets (docs/models.md, section 5).
KIMI_SPECIALS = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
                 10: "<|im_system|>", 17: "<|im_middle|>", 22: "<think>", 23: "</think>"}
# GLM-4.5+ special tokens in their release order.
GLM_SPECIALS = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
                "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>",
                "<|begin_of_video|>", "<|end_of_video|>", "<|begin_of_audio|>", "<|end_of_audio|>",
                "<|begin_of_transcription|>", "<|end_of_transcription|>", "<|code_prefix|>", "<|code_middle|>",
                "<|code_suffix|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "/nothink",
                "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>"]


def bytes_to_unicode():
    """GPT-2's byte <-> printable character table used by ByteLevel."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, default=3840)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GLM_PAT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=args.ranks, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, special_tokens=[])
    tok.train([os.path.join(args.corpus, "train.txt")], trainer)
    model = json.loads(tok.to_str())["model"]
    merges = model["merges"]
    merges = [m.split(" ") if isinstance(m, str) else m for m in merges]

    b2u = bytes_to_unicode()
    u2b = {v: k for k, v in b2u.items()}
    def tok_bytes(s):
        return bytes(u2b[c] for c in s)

    # Ranks: bytes by value, then merges in order.
    ranked = [bytes([b]) for b in range(256)]
    for a, b in merges:
        ranked.append(tok_bytes(a) + tok_bytes(b))
    assert len(set(ranked)) == len(ranked), "duplicate token"
    n = len(ranked)

    # ---- Kimi ----
    kdir = os.path.join(args.out, "kimi")
    os.makedirs(kdir, exist_ok=True)
    with open(os.path.join(kdir, "tiktoken.model"), "w") as f:
        for r, t in enumerate(ranked):
            f.write(f"{base64.b64encode(t).decode()} {r}\n")
    added = {}
    for i in range(256):
        added[str(n + i)] = {"content": KIMI_SPECIALS.get(i, f"<|reserved_token_{i}|>"), "lstrip": False,
                             "normalized": False, "rstrip": False, "single_word": False, "special": True}
    kcfg = {"added_tokens_decoder": added, "bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[EOS]",
            "unk_token": "[EOS]", "model_max_length": 1048576, "tokenizer_class": "TikTokenTokenizer",
            "pat_str": KIMI_PAT}
    with open(os.path.join(kdir, "tokenizer_config.json"), "w") as f:
        json.dump(kcfg, f, indent=2)

    # ---- GLM ----
    gdir = os.path.join(args.out, "glm")
    os.makedirs(gdir, exist_ok=True)
    vocab = {"".join(b2u[x] for x in t): r for r, t in enumerate(ranked)}
    tj = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": n + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, s in enumerate(GLM_SPECIALS)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": GLM_PAT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }
    with open(os.path.join(gdir, "tokenizer.json"), "w") as f:
        json.dump(tj, f, ensure_ascii=False)
    gcfg = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
            "model_max_length": 131072, "clean_up_tokenization_spaces": False}
    with open(os.path.join(gdir, "tokenizer_config.json"), "w") as f:
        json.dump(gcfg, f, indent=2)

    # Checks: both load in their reference libraries and agree on plain English.
    import tiktoken
    enc = tiktoken.Encoding(name="kimi-kjv", pat_str=KIMI_PAT, mergeable_ranks={t: r for r, t in enumerate(ranked)},
                            special_tokens={v: n + k for k, v in KIMI_SPECIALS.items()})
    glm = Tokenizer.from_file(os.path.join(gdir, "tokenizer.json"))
    s = "In the beginning God created the heaven and the earth."
    print("ranks", n, "kimi", enc.encode(s)[:12], "glm", glm.encode(s).ids[:12])


if __name__ == "__main__":
    main()
