#!/usr/bin/env python3
"""Trains the shipped models on the KJV training split.

--arch kimi_k2 (default): transformers' own DeepseekV3ForCausalLM (model_type kimi_k2): MLA with q
LoRA, YaRN rope, a dense first layer, then MoE layers. Tokenized with the Kimi-format tokenizer from
tools/train_tokenizer.py (tiktoken, Kimi's regex).
--arch glm4_moe: transformers' Glm4MoeForCausalLM (GLM-4.5 architecture): GQA with q/k/v biases and
per-head q/k RMSNorm, partial NeoX rotary, a dense first layer, then MoE layers. Tokenized with the
GLM-format tokenizer.json (HF tokenizers, GLM's regex and specials).

Both MoEs have 8 routed experts, top-2, one shared expert and noaux_tc routing whose
e_score_correction_bias is updated after every step by DeepSeek-V3's auxiliary-loss-free load
balancing (transformers does not train it). Saved in BF16 with the tokenizer files; held-out
perplexity is measured on the saved (BF16) weights, in float32, over non-overlapping 128-token
windows of the held-out token stream (the protocol llm-eval uses). With --keep-best the output holds
the periodic save with the best held-out perplexity (early stopping) instead of the last one.

usage: python3 tools/train_model.py CORPUS_DIR TOKENIZER_DIR OUT_DIR [--arch kimi_k2|glm4_moe]
                                    [--minutes 70] [--seed 0] [--eval-every 500] [--keep-best]
"""
import argparse
import base64
import csv
import json
import math
import os
import shutil
import time

import torch
import tiktoken
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, Glm4MoeConfig, Glm4MoeForCausalLM

SEQ = 128


def load_encoding(tok_dir):
    cfg = json.load(open(os.path.join(tok_dir, "tokenizer_config.json")))
    ranks = {}
    for line in open(os.path.join(tok_dir, "tiktoken.model")):
        b64, r = line.split()
        ranks[base64.b64decode(b64)] = int(r)
    specials = {v["content"]: int(k) for k, v in cfg["added_tokens_decoder"].items()}
    return tiktoken.Encoding(name="kimi-kjv", pat_str=cfg["pat_str"], mergeable_ranks=ranks, special_tokens=specials)


def model_config(vocab):
    return DeepseekV3Config(
        vocab_size=vocab, hidden_size=256, intermediate_size=768, moe_intermediate_size=128,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=96, kv_lora_rank=128,
        qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, n_routed_experts=8, num_experts_per_tok=2,
        n_shared_experts=1, n_group=1, topk_group=1, first_k_dense_replace=1, routed_scaling_factor=2.827,
        norm_topk_prob=True, rms_norm_eps=1e-6, max_position_embeddings=1024, rope_theta=50000.0,
        rope_scaling={"type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                      "original_max_position_embeddings": 256, "beta_fast": 32.0, "beta_slow": 1.0},
        rope_interleave=True, tie_word_embeddings=False, bos_token_id=vocab - 256, eos_token_id=vocab - 255,
        num_nextn_predict_layers=0, initializer_range=0.02)


class GlmEncoding:
    """The GLM tokenizer.json through HF tokenizers, with tiktoken's encode_ordinary interface."""

    def __init__(self, tok_dir):
        from tokenizers import Tokenizer
        self.tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
        self.n_vocab = self.tok.get_vocab_size(with_added_tokens=True)
        self.eos = self.tok.token_to_id("<|endoftext|>")
        self.user = self.tok.token_to_id("<|user|>")
        self.observation = self.tok.token_to_id("<|observation|>")

    def encode_ordinary(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids


def glm_config(vocab, enc):
    # vocab rounded up to a multiple of 64, as GLM pads its embedding tables.
    return Glm4MoeConfig(
        vocab_size=(vocab + 63) // 64 * 64, hidden_size=256, intermediate_size=768, moe_intermediate_size=128,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64, partial_rotary_factor=0.5,
        attention_bias=True, use_qk_norm=True, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
        n_group=1, topk_group=1, first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
        rms_norm_eps=1e-5, max_position_embeddings=1024, rope_theta=1000000.0, tie_word_embeddings=False,
        num_nextn_predict_layers=0, eos_token_id=[enc.eos, enc.user, enc.observation], pad_token_id=enc.eos,
        initializer_range=0.02)


@torch.no_grad()
def evaluate(model, ids, max_windows=None, window=SEQ):
    """Perplexity and top-1 accuracy over non-overlapping `window`-token windows (llm-eval's protocol)."""
    model.eval()
    n = (len(ids) - 1) // window
    if max_windows:
        n = min(n, max_windows)
    nll, correct, count = 0.0, 0, 0
    for w in range(0, n, 16):
        batch = torch.tensor([ids[i * window:(i + 1) * window] for i in range(w, min(n, w + 16))])
        logits = model(batch).logits.float()
        lp = torch.log_softmax(logits[:, :-1], -1)
        tgt = batch[:, 1:]
        nll += -lp.gather(-1, tgt[..., None]).sum().item()
        correct += (logits[:, :-1].argmax(-1) == tgt).sum().item()
        count += tgt.numel()
    model.train()
    return math.exp(nll / count), correct / count, count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("tokenizer")
    ap.add_argument("out")
    ap.add_argument("--minutes", type=float, default=70)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--arch", choices=["kimi_k2", "glm4_moe"], default="kimi_k2")
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--keep-best", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    enc = load_encoding(args.tokenizer) if args.arch == "kimi_k2" else GlmEncoding(args.tokenizer)
    train_ids = enc.encode_ordinary(open(os.path.join(args.corpus, "train.txt")).read())
    held_ids = enc.encode_ordinary(open(os.path.join(args.corpus, "heldout.txt")).read())
    vocab = enc.n_vocab
    print(f"train tokens {len(train_ids)}, held-out tokens {len(held_ids)}, vocab {vocab}", flush=True)
    if args.arch == "kimi_k2":
        cfg = model_config(vocab)
        model = DeepseekV3ForCausalLM(cfg)
    else:
        cfg = glm_config(vocab, enc)
        model = Glm4MoeForCausalLM(cfg)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"parameters {nparams} ({nparams * 2 / 1e6:.1f} MB BF16)", flush=True)
    data = torch.tensor(train_ids)

    # Auxiliary-loss-free balancing: count expert choices per step, nudge the selection bias.
    loads = {}
    def hook(name):
        def f(mod, inp, out):
            idx = out[2].detach().flatten()
            loads[name] = loads.get(name, 0) + torch.bincount(idx, minlength=cfg.n_routed_experts)
        return f
    gates = {}
    for i, layer in enumerate(model.model.layers):
        if hasattr(layer.mlp, "gate"):
            gates[i] = layer.mlp.gate
            layer.mlp.gate.register_forward_hook(hook(i))

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "loss.csv"), "w", newline="")
    writer = csv.writer(log)
    writer.writerow(["step", "tokens", "seconds", "train_loss", "lr"])
    start = time.time()
    budget = args.minutes * 60
    total_steps = None
    step, acc, accn = 0, 0.0, 0
    best_ppl, best_step, best_state = float("inf"), 0, None
    g = torch.Generator().manual_seed(args.seed)
    warmup = 100
    model.train()
    while True:
        elapsed = time.time() - start
        if step == 20:
            total_steps = int(budget / (elapsed / 20))
            print(f"{elapsed / 20:.2f} s/step: planning {total_steps} steps", flush=True)
        if total_steps is not None and step >= total_steps:
            break
        horizon = total_steps or 10 ** 9
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / horizon))))
        for pg in opt.param_groups:
            pg["lr"] = lr
        starts = torch.randint(0, len(data) - SEQ - 1, (args.batch,), generator=g)
        batch = torch.stack([data[s:s + SEQ] for s in starts])
        out = model(batch, labels=batch)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for i, gate in gates.items():
                load = loads.pop(i).float()
                gate.e_score_correction_bias += 1e-3 * torch.sign(load.mean() - load)
        acc += out.loss.item()
        accn += 1
        step += 1
        if step % 20 == 0:
            writer.writerow([step, step * args.batch * SEQ, round(time.time() - start, 1), round(acc / accn, 4), f"{lr:.2e}"])
            log.flush()
            print(f"step {step} loss {acc / accn:.4f} lr {lr:.2e} {time.time() - start:.0f}s", flush=True)
            acc, accn = 0.0, 0
        if step % args.eval_every == 0:
            ppl, top1, _ = evaluate(model, held_ids, max_windows=64)
            print(f"  held-out (64 windows) ppl {ppl:.2f} top1 {top1:.3f}", flush=True)
            model.train()
            if not args.keep_best or ppl < best_ppl:
                best_ppl, best_step = ppl, step
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                save(model, cfg, args, enc)
                print(f"  saved step {step}", flush=True)
    if args.keep_best:
        # The best save's weights (kept in memory: the saved per-expert tensor names are not the
        # in-memory fused ones) for the final numbers.
        model.load_state_dict(best_state)
        step = best_step
    else:
        save(model, cfg, args, enc)
    # Final numbers on the saved BF16 weights, computed in float32. (The model is rounded in
    # memory rather than reloaded: transformers 5.24 applies its per-expert -> fused expert
    # conversion only for model_type deepseek_v3, not kimi_k2.)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    ppl, top1, count = evaluate(model, held_ids)
    summary = {"steps": step, "seconds": round(time.time() - start), "train_tokens_seen": step * args.batch * SEQ,
               "heldout_tokens_scored": count, "heldout_perplexity": ppl, "heldout_top1": top1,
               "parameters": nparams, "seed": args.seed}
    json.dump(summary, open(os.path.join(args.out, "train_summary.json"), "w"), indent=2)
    print(json.dumps(summary), flush=True)


def save(model, cfg, args, enc):
    bias = {n: b.clone() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")}
    model.to(torch.bfloat16).save_pretrained(args.out)
    model.to(torch.float32)
    with torch.no_grad():  # keep the float32 selection bias exact across the round trip
        for n, b in model.named_buffers():
            if n in bias:
                b.copy_(bias[n])
    # As in the released Kimi checkpoints, the selection bias is stored in float32.
    from safetensors.torch import load_file, save_file
    path = os.path.join(args.out, "model.safetensors")
    tensors = load_file(path)
    for n, b in bias.items():
        tensors[n] = b.float().contiguous()
    save_file(tensors, path, metadata={"format": "pt"})
    if args.arch == "kimi_k2":
        c = json.load(open(os.path.join(args.out, "config.json")))
        c["model_type"] = "kimi_k2"
        json.dump(c, open(os.path.join(args.out, "config.json"), "w"), indent=2, sort_keys=True)
    files = ("tiktoken.model", "tokenizer_config.json") if args.arch == "kimi_k2" else ("tokenizer.json", "tokenizer_config.json")
    for f in files:
        shutil.copy(os.path.join(args.tokenizer, f), os.path.join(args.out, f))


if __name__ == "__main__":
    main()
