#!/usr/bin/env python3
"""Creates the tiny GLM-5-architecture (glm_moe_dsa) checkpoint under tests/data and its golden logits.

Built with transformers' own GlmMoeDsaForCausalLM and saved with save_pretrained: MLA with q LoRA,
the DeepSeek Sparse Attention indexer (index_topk 8, smaller than the longer prompts, so the
sparse path runs in prefill and, as the context grows, in decode), a "shared" indexer layer
that reuses the previous full layer's top-k, mlp_layer_types with a dense first layer, grouped
noaux_tc routing. References: transformers' float32 eager forward, recomputing the whole
sequence at each greedy step; and the same with what llmrt's BF16 KV codec stores (latent, roped
shared key, indexer key) rounded to bf16.

The goldens follow transformers 5.24.0's GlmMoeDsaIndexer: ReLU on each head's q.k before the
weighted head sum, and the interleaved rotary layout on the first qk_rope_head_dim dims of the
index query and key (DeepSeek-V3.2's indexer uses the half-split layout instead).

The top-k selection is discontinuous, so the generator checks that every selection it makes is
decisive: the gap between the k-th and (k+1)-th index scores must be far above float32 noise
(it prints the smallest relative gap).

Run from the repository root:  python3 tools/make_golden_glm_moe_dsa.py
Pinned: transformers 5.24.0, torch 2.15.0.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM
from transformers.models.glm_moe_dsa import modeling_glm_moe_dsa as mdsa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden_deepseek import PROMPTS, DECODE_STEPS, bf16_round, greedy_reference, randomize  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
NAME = "tiny_glm_moe_dsa"
INDEX_TOPK = 8
SEED = int(os.environ.get("GOLDEN_SEED", "5153"))


class Bf16KvCacheDsa:
    """Rounds what llmrt's BF16 cache stores to bfloat16: the normalized latent, the roped shared
    key and the full indexer key (roped first part and pass-through part)."""

    def __init__(self, model):
        self.model, self.hooks, self.saved = model, [], None

    def __enter__(self):
        rope = self.model.config.qk_rope_head_dim
        for layer in self.model.model.layers:
            attn = layer.self_attn
            self.hooks.append(attn.kv_a_layernorm.register_forward_hook(lambda m, i, o: bf16_round(o)))
            if attn.indexer is not None:
                def round_pass(m, i, o):
                    o = o.clone()
                    o[..., rope:] = bf16_round(o[..., rope:])
                    return o
                self.hooks.append(attn.indexer.k_norm.register_forward_hook(round_pass))
        self.saved = mdsa.apply_rotary_pos_emb_interleave

        def wrapped(q, k, cos, sin, *a, **kw):
            q2, k2 = self.saved(q, k, cos, sin, *a, **kw)
            return q2, bf16_round(k2)
        mdsa.apply_rotary_pos_emb_interleave = wrapped
        return self

    def __exit__(self, *exc):
        for h in self.hooks:
            h.remove()
        mdsa.apply_rotary_pos_emb_interleave = self.saved


class SelectionGaps:
    """Recomputes each indexer's scores (as GlmMoeDsaIndexer.forward does) and records, for every
    query whose causal context exceeds index_topk, the relative gap between its k-th and (k+1)-th
    scores."""

    def __init__(self, model):
        self.model, self.hooks, self.gaps = model, [], []

    def hook(self, mod, args, kwargs, out):
        hs, q_resid, (cos, sin) = args[0], args[1], args[2]
        b, s, _ = hs.shape
        q = mod.wq_b(q_resid).view(b, s, mod.n_heads, mod.head_dim)
        q_rot, q_pass = torch.split(q, [mod.qk_rope_head_dim, mod.head_dim - mod.qk_rope_head_dim], dim=-1)
        k = mod.k_norm(mod.wk(hs)).unsqueeze(2)
        k_rot, k_pass = torch.split(k, [mod.qk_rope_head_dim, mod.head_dim - mod.qk_rope_head_dim], dim=-1)
        q_rot, k_rot = mdsa.apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
        q = torch.cat([q_rot, q_pass], dim=-1)
        k = torch.cat([k_rot, k_pass], dim=-1).squeeze(2)
        sc = F.relu(torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)) * mod.softmax_scale)
        w = mod.weights_proj(hs).float() * (mod.n_heads ** -0.5)
        idx = torch.matmul(w.unsqueeze(-2), sc).squeeze(-2)[0]  # [S, T]
        for t in range(s):
            ctx = t + 1
            if ctx <= mod.index_topk:
                continue
            v = torch.sort(idx[t, :ctx], descending=True).values
            kth, nxt = float(v[mod.index_topk - 1]), float(v[mod.index_topk])
            self.gaps.append((kth - nxt) / max(abs(kth), 1e-6))

    def __enter__(self):
        for layer in self.model.model.layers:
            if layer.self_attn.indexer is not None:
                self.hooks.append(layer.self_attn.indexer.register_forward_hook(self.hook, with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for h in self.hooks:
            h.remove()


def main():
    torch.manual_seed(0)
    cfg = GlmMoeDsaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16,
        qk_rope_head_dim=16, v_head_dim=16, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
        n_group=2, topk_group=1, routed_scaling_factor=2.5, norm_topk_prob=True, rms_norm_eps=1e-5,
        max_position_embeddings=4096, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
        index_topk=INDEX_TOPK, index_head_dim=32, index_n_heads=8,
        indexer_types=["full", "full", "shared", "full"],
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"], first_k_dense_replace=1)
    cfg._attn_implementation = "eager"
    model = GlmMoeDsaForCausalLM(cfg).eval()
    randomize(model, SEED)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("k_norm.bias"):
                p.copy_(0.3 * torch.randn(p.shape))
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):  # saved as bf16 too
                b.copy_(b.to(torch.bfloat16).to(torch.float32))
    d = os.path.join(OUT, NAME)
    os.makedirs(d, exist_ok=True)
    save = GlmMoeDsaForCausalLM(cfg)
    save.load_state_dict(model.state_dict())
    save.to(torch.bfloat16).save_pretrained(d)
    cases, gaps = [], []
    for prompt in PROMPTS:
        with SelectionGaps(model) as g:
            gen, steps = greedy_reference(model, prompt)
        gaps += g.gaps
        with Bf16KvCacheDsa(model), SelectionGaps(model) as g:
            gen_b, steps_b = greedy_reference(model, prompt)
        gaps += g.gaps
        cases.append({"prompt": prompt, "generated": gen, "steps": steps,
                      "bf16_kv": {"generated": gen_b, "steps": steps_b}})
    with open(os.path.join(OUT, NAME + ".golden.json"), "w") as f:
        json.dump({"model": NAME, "transformers": __import__("transformers").__version__,
                   "decode_steps": DECODE_STEPS, "index_topk": INDEX_TOPK, "cases": cases}, f)
    print(NAME, "smallest top-2 logit margin", min(s["margin"] for c in cases for s in c["steps"]),
          "; sparse selections", len(gaps), "smallest relative k-th/(k+1)-th gap", min(gaps), file=sys.stderr)
    if min(gaps) < 1e-4:  # float32 accumulation-order noise is ~1e-6 relative here
        sys.exit("a top-k selection is too close to a tie to be a stable golden; change the seed")


if __name__ == "__main__":
    main()
