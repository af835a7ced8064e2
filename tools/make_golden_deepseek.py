#!/usr/bin/env python3
"""Creates the tiny DeepSeek-V3-architecture checkpoints under tests/data and their golden logits.

The checkpoints are built with transformers' own DeepseekV3 classes and saved with save_pretrained,
so their tensor names, dtypes and config.json are exactly what the Hugging Face ecosystem writes.
References come from transformers' forward pass in float32 (eager attention), recomputing the whole
sequence at every greedy step (no KV cache involved on the reference side).

Run from the repository root:  python3 tools/make_golden_deepseek.py [--only NAME]
Pinned: transformers 5.24.0, torch 2.15.0 (the versions the committed goldens were produced with).
"""
import json
import os
import sys

import torch
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as mdv3

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")

COMMON = dict(
    vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
    num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32, qk_nope_head_dim=16,
    qk_rope_head_dim=16, v_head_dim=16, n_routed_experts=8, num_experts_per_tok=2,
    n_shared_experts=1, routed_scaling_factor=2.5, norm_topk_prob=True, rms_norm_eps=1e-6,
    max_position_embeddings=4096, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
    num_nextn_predict_layers=0,
)

CONFIGS = {
    # q_lora_rank set, YaRN with mscale != mscale_all_dim (so both the cos/sin attention factor and the
    # softmax scale differ from 1), grouped routing with topk_group < n_group, one dense layer first.
    "tiny_kimi_k2_qlora_yarn": dict(
        dtype=torch.bfloat16, q_lora_rank=48, n_group=2, topk_group=1, first_k_dense_replace=1,
        rope_interleave=True,
        rope_scaling={"type": "yarn", "factor": 32.0, "mscale": 1.0, "mscale_all_dim": 0.8,
                      "original_max_position_embeddings": 128, "beta_fast": 32.0, "beta_slow": 1.0},
        rope_theta=50000.0, model_type="kimi_k2"),
    # q_lora_rank null (DeepSeek-V2-Lite style q_proj), plain rope, NeoX layout, F32 weights, two dense layers.
    "tiny_deepseek_noqlora_f32": dict(
        dtype=torch.float32, q_lora_rank=None, n_group=1, topk_group=1, first_k_dense_replace=2,
        num_hidden_layers=4, rope_interleave=False, rope_scaling=None, rope_theta=10000.0,
        model_type="deepseek_v3"),
    # Eight query heads (and a 128-wide dense MLP, 32-wide experts, 256 vocabulary rows: all split
    # over 8 ranks) for tensor parallelism at degree 8; q LoRA, YaRN, grouped routing as above.
    "tiny_kimi_k2_tp8": dict(
        dtype=torch.bfloat16, q_lora_rank=48, n_group=2, topk_group=1, first_k_dense_replace=1,
        num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=8, intermediate_size=128,
        rope_interleave=True,
        rope_scaling={"type": "yarn", "factor": 32.0, "mscale": 1.0, "mscale_all_dim": 0.8,
                      "original_max_position_embeddings": 128, "beta_fast": 32.0, "beta_slow": 1.0},
        rope_theta=50000.0, model_type="kimi_k2"),
}

PROMPTS = [
    [0, 17, 42, 99, 3, 250, 7],
    [0, 5],
    [0] + [(i * 37 + 11) % 256 for i in range(40)],  # crosses several 16-token pages
]
DECODE_STEPS = 8


def randomize(model, seed):
    """Gives the model weights with enough spread that greedy choices are decisive."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # norm weights
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) * (1.5 / fan_in ** 0.5))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))


def bf16_round(t):
    return t.to(torch.bfloat16).to(t.dtype)


class Bf16KvCache:
    """Makes transformers store the MLA cache in bfloat16, as llmrt's BF16 KV codec does:
    the normalized latent (kv_a_layernorm output) and the roped shared key are rounded to bf16
    before attention reads them; queries and everything else stay float32."""

    def __init__(self, model):
        self.model = model
        self.hooks = []
        self.saved = {}

    def __enter__(self):
        for layer in self.model.model.layers:
            self.hooks.append(layer.self_attn.kv_a_layernorm.register_forward_hook(
                lambda mod, inp, out: bf16_round(out)))
        for name in ("apply_rotary_pos_emb", "apply_rotary_pos_emb_interleave"):
            orig = getattr(mdv3, name)
            self.saved[name] = orig

            def wrapped(q, k, cos, sin, *a, _orig=orig, **kw):
                q2, k2 = _orig(q, k, cos, sin, *a, **kw)
                return q2, bf16_round(k2)
            setattr(mdv3, name, wrapped)
        return self

    def __exit__(self, *exc):
        for h in self.hooks:
            h.remove()
        for name, orig in self.saved.items():
            setattr(mdv3, name, orig)


def greedy_reference(model, prompt):
    seq = list(prompt)
    steps = []
    with torch.no_grad():
        for _ in range(DECODE_STEPS + 1):
            logits = model(torch.tensor([seq])).logits[0, -1].float()
            tok = int(torch.argmax(logits))
            top2 = torch.topk(logits, 2).values
            steps.append({"logits": [round(float(x), 7) for x in logits],
                          "argmax": tok, "margin": float(top2[0] - top2[1])})
            seq.append(tok)
    return seq[len(prompt):], steps


def main():
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    torch.manual_seed(0)
    for idx, (name, spec) in enumerate(CONFIGS.items()):
        if only is not None and name != only:
            continue
        spec = dict(spec)
        dtype = spec.pop("dtype")
        model_type = spec.pop("model_type")
        kw = dict(COMMON)
        kw.update(spec)
        cfg = DeepseekV3Config(**kw)
        cfg._attn_implementation = "eager"
        model = DeepseekV3ForCausalLM(cfg).eval()
        randomize(model, 1234 + idx)
        # Round weights to the storage dtype first, so the float32 reference sees exactly the
        # values the engine loads.
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(dtype).to(torch.float32))
            for n, b in model.named_buffers():
                if n.endswith("e_score_correction_bias"):  # saved in the checkpoint dtype too
                    b.copy_(b.to(dtype).to(torch.float32))
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        save = DeepseekV3ForCausalLM(cfg)
        save.load_state_dict(model.state_dict())
        save = save.to(dtype)
        save.save_pretrained(d)
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        c["model_type"] = model_type
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(c, f, indent=2, sort_keys=True)

        cases = []
        for prompt in PROMPTS:
            gen, steps = greedy_reference(model, prompt)
            with Bf16KvCache(model):
                gen_bf16, steps_bf16 = greedy_reference(model, prompt)
            cases.append({"prompt": prompt, "generated": gen, "steps": steps,
                          "bf16_kv": {"generated": gen_bf16, "steps": steps_bf16}})
        golden = {"model": name, "transformers": __import__("transformers").__version__,
                  "torch": torch.__version__, "decode_steps": DECODE_STEPS, "cases": cases}
        with open(os.path.join(OUT, name + ".golden.json"), "w") as f:
            json.dump(golden, f)
        mins = min(s["margin"] for c in cases for s in c["steps"])
        print(f"{name}: wrote {d}; smallest top-2 margin {mins:.4f}", file=sys.stderr)


if __name__ == "__main__":
    main()
