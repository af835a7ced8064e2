#!/usr/bin/env python3
"""Creates the tiny GLM-4.5-architecture checkpoint under tests/data and its golden logits.

Built with transformers' own Glm4MoeForCausalLM and saved with save_pretrained: GQA with q/k/v
biases and per-head q/k RMSNorm, partial NeoX rotary (factor 0.5), a dense first layer, then MoE
with grouped noaux_tc routing and a shared expert. References: transformers' float32 forward,
recomputing the whole sequence at each greedy step; and the same with the cached K (after rope)
and V rounded to bf16 (llmrt's BF16 KV codec).

Run from the repository root:  python3 tools/make_golden_glm4_moe.py [--tp8]
(--tp8 makes tiny_glm4_moe_tp8 instead: eight query and eight KV heads, every width split over
eight ranks, for tensor parallelism at degree 8.)
Pinned: transformers 5.24.0, torch 2.15.0.
"""
import json
import os
import sys

import torch
from transformers import Glm4MoeConfig, Glm4MoeForCausalLM
from transformers.models.glm4_moe import modeling_glm4_moe as mglm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden_deepseek import PROMPTS, DECODE_STEPS, bf16_round, greedy_reference, randomize  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
NAME = "tiny_glm4_moe"


class Bf16KvCacheGlm:
    """Rounds what the GQA cache stores (K after q/k norm and rope, V) to bfloat16."""

    def __init__(self, model):
        self.model, self.hooks, self.saved = model, [], None

    def __enter__(self):
        for layer in self.model.model.layers:
            self.hooks.append(layer.self_attn.v_proj.register_forward_hook(lambda m, i, o: bf16_round(o)))
        self.saved = mglm.apply_rotary_pos_emb

        def wrapped(q, k, cos, sin, *a, **kw):
            q2, k2 = self.saved(q, k, cos, sin, *a, **kw)
            return q2, bf16_round(k2)
        mglm.apply_rotary_pos_emb = wrapped
        return self

    def __exit__(self, *exc):
        for h in self.hooks:
            h.remove()
        mglm.apply_rotary_pos_emb = self.saved


def main():
    torch.manual_seed(0)
    tp8 = "--tp8" in sys.argv
    name = NAME + "_tp8" if tp8 else NAME
    shape = (dict(intermediate_size=128, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=8, head_dim=8)
             if tp8 else
             dict(intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16))
    cfg = Glm4MoeConfig(
        vocab_size=256, hidden_size=64, moe_intermediate_size=32, **shape, partial_rotary_factor=0.5,
        attention_bias=True, use_qk_norm=True, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
        n_group=2, topk_group=1, first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
        rms_norm_eps=1e-5, max_position_embeddings=4096, rope_theta=1000000.0, tie_word_embeddings=False,
        num_nextn_predict_layers=0, bos_token_id=0, eos_token_id=1)
    cfg._attn_implementation = "eager"
    model = Glm4MoeForCausalLM(cfg).eval()
    randomize(model, 4321)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith(".bias"):
                p.copy_(0.3 * torch.randn(p.shape))
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):  # saved as bf16 too
                b.copy_(b.to(torch.bfloat16).to(torch.float32))
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    save = Glm4MoeForCausalLM(cfg)
    save.load_state_dict(model.state_dict())
    save.to(torch.bfloat16).save_pretrained(d)
    cases = []
    for prompt in PROMPTS:
        gen, steps = greedy_reference(model, prompt)
        with Bf16KvCacheGlm(model):
            gen_b, steps_b = greedy_reference(model, prompt)
        cases.append({"prompt": prompt, "generated": gen, "steps": steps,
                      "bf16_kv": {"generated": gen_b, "steps": steps_b}})
    with open(os.path.join(OUT, name + ".golden.json"), "w") as f:
        json.dump({"model": name, "transformers": __import__("transformers").__version__,
                   "decode_steps": DECODE_STEPS, "cases": cases}, f)
    print(name, "smallest margin", min(s["margin"] for c in cases for s in c["steps"]), file=sys.stderr)


if __name__ == "__main__":
    main()
