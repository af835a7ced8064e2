#!/usr/bin/env python3
"""Creates tiny quantized Kimi K2-architecture checkpoints under tests/data and their golden logits.

One random DeepseekV3ForCausalLM (model_type kimi_k2; sizes chosen so that weight blocks and INT4
groups of 128 fit), written three ways, in the formats of the released checkpoints (docs/models.md, section 4):

- tiny_kimi_k2_fp8: DeepSeek/Kimi FP8 -- every linear weight of the decoder layers (attention
  projections including kv_b_proj, dense MLP, routed and shared experts; not the router) as
  float8_e4m3fn with float32 `weight_scale_inv` per 64x64 block (quantization_config fp8,
  weight_block_size [64, 64]: several blocks per matrix and partial blocks, at this size);
- tiny_kimi_k2_int4_g32 / _g128: Kimi K2-Thinking INT4 -- the routed experts only, compressed-tensors
  pack-quantized (weight_packed int32, weight_scale bf16, weight_shape), symmetric, group 32 / 128,
  packed with compressed-tensors' own pack_to_int32.

- tiny_kimi_k2_quant_base: the same model unquantized (BF16), the source of quantization at load
  (llmrt's INT4 round to nearest reproduces tiny_kimi_k2_int4_g32 from it exactly);
- tiny_glm4_moe_fp8 / tiny_glm_moe_dsa_fp8: the GLM-4.5 and GLM-5 test checkpoints
  (tools/make_golden_glm4_moe.py, make_golden_glm_moe_dsa.py) in the same FP8 format, 32x32 blocks
  (their matrices are 64 wide): q/k/v/o projections (GLM-4.5; biases stay BF16), the MLA
  projections and the DSA indexer's wq_b and wk (GLM-5; weights_proj stays BF16, as released), and
  every MLP and expert projection.

Everything else is BF16. References: the weights are dequantized by a direct block
multiplication (FP8: q * scale_inv per block) or by compressed-tensors (unpack_from_int32 +
dequantize), in float32, and transformers runs the dequantized model in float32 (eager),
recomputing the whole sequence at each greedy step; plus the same with a bf16-rounded MLA cache.

Run from the repository root:  python3 tools/make_golden_quant.py
Pinned: transformers 5.24.0, torch 2.15.0, compressed-tensors 0.20.1.
"""
import json
import os
import re
import sys

import torch
from safetensors.torch import save_file
from transformers import (DeepseekV3Config, DeepseekV3ForCausalLM, Glm4MoeConfig, Glm4MoeForCausalLM,
                          GlmMoeDsaConfig, GlmMoeDsaForCausalLM)
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32, unpack_from_int32
from compressed_tensors.quantization import QuantizationArgs
from compressed_tensors.quantization.lifecycle.forward import dequantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden_deepseek import PROMPTS, DECODE_STEPS, Bf16KvCache, greedy_reference, randomize  # noqa: E402
from make_golden_glm4_moe import Bf16KvCacheGlm  # noqa: E402
from make_golden_glm_moe_dsa import Bf16KvCacheDsa, SelectionGaps  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
FP8_BLOCK = 64

CONFIG = dict(
    vocab_size=256, hidden_size=128, intermediate_size=192, moe_intermediate_size=128, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=4, q_lora_rank=96, kv_lora_rank=64, qk_nope_head_dim=32,
    qk_rope_head_dim=16, v_head_dim=32, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
    n_group=1, topk_group=1, first_k_dense_replace=1, routed_scaling_factor=2.827, norm_topk_prob=True,
    rms_norm_eps=1e-6, max_position_embeddings=4096, rope_theta=50000.0, rope_interleave=True,
    tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, num_nextn_predict_layers=0)

LAYER_LINEAR = re.compile(r"model\.layers\.\d+\.(self_attn\.(q_a|q_b|kv_a_proj_with_mqa|kv_b|o)(_proj)?|"
                          r"mlp\.(gate_proj|up_proj|down_proj)|mlp\.experts\.\d+\.\w+_proj|"
                          r"mlp\.shared_experts\.\w+_proj)\.weight$")
EXPERT = re.compile(r"model\.layers\.\d+\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$")


GLM_LINEAR = re.compile(r"model\.layers\.\d+\.(self_attn\.(q|k|v|o|q_a|q_b|kv_a_proj_with_mqa|kv_b)(_proj)?|"
                        r"self_attn\.indexer\.(wq_b|wk)|mlp\.(gate_proj|up_proj|down_proj)|"
                        r"mlp\.experts\.\d+\.\w+_proj|mlp\.shared_experts\.\w+_proj)\.weight$")


def fp8_block_quantize(w, block=None):
    """float32 [rows, cols] -> (float8_e4m3fn codes, float32 scale_inv [ceil(r/B), ceil(c/B)])."""
    FP8_BLOCK = block or globals()["FP8_BLOCK"]
    rows, cols = w.shape
    nr, nc = -(-rows // FP8_BLOCK), -(-cols // FP8_BLOCK)
    scale = torch.zeros(nr, nc)
    q = torch.zeros(rows, cols, dtype=torch.float8_e4m3fn)
    for i in range(nr):
        for j in range(nc):
            blk = w[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK]
            s = blk.abs().max().clamp(min=1e-12) / 448.0
            scale[i, j] = s
            q[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK] = (blk / s).to(torch.float8_e4m3fn)
    return q, scale


def fp8_block_dequantize(q, scale, block=None):
    """Direct block dequantization: w = q * scale_inv of the block (DeepSeek's weight_dequant)."""
    FP8_BLOCK = block or globals()["FP8_BLOCK"]
    rows, cols = q.shape
    s = scale.repeat_interleave(FP8_BLOCK, 0)[:rows].repeat_interleave(FP8_BLOCK, 1)[:, :cols]
    return q.float() * s


def int4_quantize(w, group):
    """Symmetric round-to-nearest: scale = amax / 7 per group (bf16), codes in [-8, 7]."""
    rows, cols = w.shape
    g = w.view(rows, cols // group, group)
    scale = (g.abs().amax(-1) / 7.0).clamp(min=1e-12).to(torch.bfloat16)
    q = torch.round(g / scale.float()[..., None]).clamp(-8, 7).to(torch.int8).view(rows, cols)
    return q, scale


def int4_args(group):
    return QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=group)


def int4_quant_config(group):
    return {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None,
                                          "output_activations": None,
                                          "weights": {"num_bits": 4, "type": "int", "symmetric": True,
                                                      "strategy": "group", "group_size": group, "dynamic": False,
                                                      "actorder": None, "observer": "minmax"}}},
            "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|down)_proj.*",
                       "re:.*mlp\\.gate$"],
            "kv_cache_scheme": None}


def write(name, tensors, cfg_dict, quant_config):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    c = dict(cfg_dict)
    if quant_config is not None:
        c["quantization_config"] = quant_config
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
    return d


def goldens(model, name, extra, bf16_cache=Bf16KvCache):
    cases, gaps = [], []
    dsa = isinstance(model, GlmMoeDsaForCausalLM)
    for prompt in PROMPTS:
        with SelectionGaps(model) if dsa else _Null() as g:
            gen, steps = greedy_reference(model, prompt)
        with bf16_cache(model), (SelectionGaps(model) if dsa else _Null()) as g2:
            gen_b, steps_b = greedy_reference(model, prompt)
        if dsa:
            gaps += g.gaps + g2.gaps
        cases.append({"prompt": prompt, "generated": gen, "steps": steps,
                      "bf16_kv": {"generated": gen_b, "steps": steps_b}})
    golden = {"model": name, "transformers": __import__("transformers").__version__, "torch": torch.__version__,
              "compressed_tensors": __import__("compressed_tensors").__version__, "decode_steps": DECODE_STEPS,
              "cases": cases}
    golden.update(extra)
    with open(os.path.join(OUT, name + ".golden.json"), "w") as f:
        json.dump(golden, f)
    print(name, "smallest top-2 margin", min(s["margin"] for c in cases for s in c["steps"]), file=sys.stderr)
    if dsa:
        print(name, "smallest relative top-k gap", min(gaps), file=sys.stderr)
        if min(gaps) < 1e-4:
            sys.exit("a DSA top-k selection is too close to a tie to be a stable golden")


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def fused_model(cls, cfg, full):
    """A float32 `cls` model from a per-expert state dict (fusing experts as transformers does)."""
    m = cls(cfg).eval()
    sd = m.state_dict()
    for k in list(sd):
        if k.endswith("mlp.experts.gate_up_proj"):
            p = k[: -len("gate_up_proj")]
            sd[k] = torch.stack([torch.cat([full[f"{p}{e}.gate_proj.weight"], full[f"{p}{e}.up_proj.weight"]])
                                 for e in range(cfg.n_routed_experts)])
        elif k.endswith("mlp.experts.down_proj"):
            p = k[: -len("down_proj")]
            sd[k] = torch.stack([full[f"{p}{e}.down_proj.weight"] for e in range(cfg.n_routed_experts)])
        else:
            sd[k] = full[k]
    m.load_state_dict(sd)
    return m


def glm_fp8(src, name, cfg_cls, model_cls, bf16_cache, block=32):
    """The FP8 (block x block) version of a GLM test checkpoint and its goldens."""
    from safetensors.torch import load_file
    d = os.path.join(OUT, src)
    state = load_file(os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json")) as f:
        cfg_dict = json.load(f)
    cfg = cfg_cls(**{k: v for k, v in cfg_dict.items() if k not in ("architectures", "transformers_version", "dtype")})
    cfg._attn_implementation = "eager"
    tensors, full = {}, {}
    for k, v in state.items():
        if GLM_LINEAR.match(k):
            q, sc = fp8_block_quantize(v.float(), block)
            tensors[k] = q
            tensors[k + "_scale_inv"] = sc
            full[k] = fp8_block_dequantize(q, sc, block)
        else:
            tensors[k] = v
            full[k] = v.float()
    write(name, tensors, cfg_dict, {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                    "weight_block_size": [block, block]})
    goldens(fused_model(model_cls, cfg, full), name, {"weight_block_size": [block, block]}, bf16_cache)


def main():
    torch.manual_seed(0)
    cfg = DeepseekV3Config(**CONFIG)
    cfg._attn_implementation = "eager"
    base = DeepseekV3ForCausalLM(cfg).eval()
    randomize(base, 777)
    with torch.no_grad():
        for p in base.parameters():
            p.copy_(p.to(torch.bfloat16).float())
        for n, b in base.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.copy_(b.to(torch.bfloat16).float())
    # The per-expert state dict transformers saves (save_pretrained un-fuses the experts).
    tmp = os.path.join(OUT, ".quant_base")
    base.to(torch.bfloat16).save_pretrained(tmp)
    base.float()
    from safetensors.torch import load_file
    state = load_file(os.path.join(tmp, "model.safetensors"))
    with open(os.path.join(tmp, "config.json")) as f:
        cfg_dict = json.load(f)
    cfg_dict["model_type"] = "kimi_k2"
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)

    write("tiny_kimi_k2_quant_base", dict(state), cfg_dict, None)
    if "--base-only" in sys.argv:
        return

    def reference(deq):
        """The float32 model whose per-expert weights are `deq` (name -> float32 tensor)."""
        full = {k: v.float() for k, v in state.items()}
        full.update(deq)
        return fused_model(DeepseekV3ForCausalLM, cfg, full)

    if "--glm-only" in sys.argv:
        return glm_only()

    # FP8 block-scaled.
    tensors, deq = {}, {}
    for k, v in state.items():
        if LAYER_LINEAR.match(k):
            q, s = fp8_block_quantize(v.float())
            tensors[k] = q
            tensors[k + "_scale_inv"] = s
            deq[k] = fp8_block_dequantize(q, s)
        else:
            tensors[k] = v
    write("tiny_kimi_k2_fp8", tensors, cfg_dict,
          {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [FP8_BLOCK, FP8_BLOCK]})
    goldens(reference(deq), "tiny_kimi_k2_fp8", {"weight_block_size": [FP8_BLOCK, FP8_BLOCK]})

    # INT4 routed experts, compressed-tensors pack-quantized.
    for group in (32, 128):
        tensors, deq = {}, {}
        for k, v in state.items():
            if EXPERT.match(k):
                q, s = int4_quantize(v.float(), group)
                stem = k[: -len("weight")]
                packed = pack_to_int32(q, 4)
                tensors[stem + "weight_packed"] = packed
                tensors[stem + "weight_scale"] = s
                tensors[stem + "weight_shape"] = torch.tensor(list(v.shape), dtype=torch.int32)
                unpacked = unpack_from_int32(packed, 4, v.shape)
                deq[k] = dequantize(unpacked.float(), s.float(), args=int4_args(group), dtype=torch.float32)
            else:
                tensors[k] = v
        name = f"tiny_kimi_k2_int4_g{group}"
        write(name, tensors, cfg_dict, int4_quant_config(group))
        goldens(reference(deq), name, {"group_size": group})
    glm_only()


def glm_only():
    glm_fp8("tiny_glm4_moe", "tiny_glm4_moe_fp8", Glm4MoeConfig, Glm4MoeForCausalLM, Bf16KvCacheGlm)
    glm_fp8("tiny_glm_moe_dsa", "tiny_glm_moe_dsa_fp8", GlmMoeDsaConfig, GlmMoeDsaForCausalLM, Bf16KvCacheDsa)


if __name__ == "__main__":
    main()
