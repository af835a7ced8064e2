#!/usr/bin/env python3
"""Transformers' own evaluation of a shipped checkpoint, and its golden logits for the C++ tests.

- Held-out perplexity and top-1 accuracy over non-overlapping windows of --window tokens (the
  protocol of llm-eval), computed by transformers in float32 from the checkpoint's BF16 weights.
- Golden logits: greedy continuations of fixed text prompts, with and without a bf16 KV cache
  (same format as tools/make_golden_deepseek.py), written to --golden.

transformers 5.24 converts per-expert weights to its fused layout only for model_type deepseek_v3,
so a kimi_k2 checkpoint is loaded from a temporary copy whose config says deepseek_v3. GLM-4.5
architecture checkpoints (Glm4MoeForCausalLM, GLM tokenizer.json) load directly.

usage: python3 tools/eval_hf.py MODEL_DIR HELDOUT_TXT [--window 128] [--golden OUT.json]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import torch
from transformers import DeepseekV3ForCausalLM, Glm4MoeForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden_deepseek import Bf16KvCache  # noqa: E402
from make_golden_glm4_moe import Bf16KvCacheGlm  # noqa: E402
from train_model import GlmEncoding, evaluate, load_encoding  # noqa: E402

PROMPTS = ["In the beginning", "And the LORD said unto Moses,"]
STEPS = 5


def is_glm(model_dir):
    return json.load(open(os.path.join(model_dir, "config.json")))["architectures"][0] == "Glm4MoeForCausalLM"


def load(model_dir):
    if is_glm(model_dir):
        m = Glm4MoeForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        m.config._attn_implementation = "eager"
        return m.eval()
    tmp = tempfile.mkdtemp()
    for f in os.listdir(model_dir):
        if f.endswith(".safetensors") or f.endswith(".json"):
            shutil.copy(os.path.join(model_dir, f), tmp)
    cfg = json.load(open(os.path.join(tmp, "config.json")))
    cfg["model_type"] = "deepseek_v3"
    json.dump(cfg, open(os.path.join(tmp, "config.json"), "w"))
    m = DeepseekV3ForCausalLM.from_pretrained(tmp, dtype=torch.float32)
    m.config._attn_implementation = "eager"
    shutil.rmtree(tmp)
    return m.eval()


def greedy(model, ids, steps):
    seq = list(ids)
    out = []
    with torch.no_grad():
        for _ in range(steps + 1):
            logits = model(torch.tensor([seq])).logits[0, -1].float()
            tok = int(torch.argmax(logits))
            top2 = torch.topk(logits, 2).values
            out.append({"logits": [round(float(x), 5) for x in logits], "argmax": tok,
                        "margin": float(top2[0] - top2[1])})
            seq.append(tok)
    return seq[len(ids):], out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("heldout")
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--golden")
    args = ap.parse_args()
    glm = is_glm(args.model)
    enc = GlmEncoding(args.model) if glm else load_encoding(args.model)
    cache = Bf16KvCacheGlm if glm else Bf16KvCache
    model = load(args.model)
    ids = enc.encode_ordinary(open(args.heldout).read())
    ppl, top1, count = evaluate(model, ids, window=args.window)
    print(json.dumps({"tokens": len(ids), "windows": (len(ids) - 1) // args.window, "scored": count,
                      "perplexity": ppl, "top1": top1}))
    if args.golden:
        cases = []
        for p in PROMPTS:
            pid = enc.encode_ordinary(p)
            gen, steps = greedy(model, pid, STEPS)
            with cache(model):
                gen_b, steps_b = greedy(model, pid, STEPS)
            cases.append({"prompt": pid, "text": p, "generated": gen, "steps": steps,
                          "bf16_kv": {"generated": gen_b, "steps": steps_b}})
        json.dump({"model": os.path.basename(os.path.normpath(args.model)), "decode_steps": STEPS, "cases": cases},
                  open(args.golden, "w"))


if __name__ == "__main__":
    main()
