#!/usr/bin/env python3
"""Builds a random DeepSeek-V4 checkpoint with Hugging Face transformers and records its fp32
logits, as an external reference hart has never been tuned on.

Run where transformers (5.17+) and torch exist (the GPU machine's image has both; CPU is enough):
    python3 scripts/golden/make_v4_golden.py OUT_DIR [--seq 1100] [--batch 2]
Writes OUT_DIR/{config.json, model-*.safetensors, model.safetensors.index.json,
golden.safetensors (input_ids [B,S] I64, logits [B,S,V] F32, topk.<layer> [B,S,k] I64),
golden.json}.
Weights are rounded to bf16 and saved as bf16 shards; the logits come from reloading those
shards in fp32, so they describe exactly the saved checkpoint.
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM


def make_config():
    return DeepseekV4Config(
        vocab_size=601,
        hidden_size=192,
        num_hidden_layers=7,
        num_attention_heads=6,
        num_key_value_heads=1,
        head_dim=128,
        qk_rope_head_dim=32,
        partial_rotary_factor=0.25,
        q_lora_rank=72,
        o_groups=3,
        o_lora_rank=40,
        sliding_window=128,
        layer_types=[
            "heavily_compressed_attention", "sliding_attention", "compressed_sparse_attention",
            "heavily_compressed_attention", "compressed_sparse_attention",
            "heavily_compressed_attention", "compressed_sparse_attention",
        ],
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
        mlp_layer_types=["hash_moe", "hash_moe", "hash_moe", "moe", "moe", "moe", "moe"],
        index_n_heads=8,
        index_head_dim=64,
        index_topk=24,
        n_routed_experts=12,
        n_shared_experts=1,
        num_experts_per_tok=3,
        moe_intermediate_size=64,
        routed_scaling_factor=2.5,
        swiglu_limit=10.0,
        hc_mult=4,
        hc_sinkhorn_iters=20,
        hc_eps=1e-6,
        rms_norm_eps=1e-6,
        max_position_embeddings=1048576,
        rope_parameters={
            "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
            "compress": {"rope_type": "yarn", "rope_theta": 160000.0, "partial_rotary_factor": 0.25,
                         "factor": 16.0, "original_max_position_embeddings": 65536,
                         "beta_fast": 32.0, "beta_slow": 1.0, "attention_factor": 1.0},
        },
        initializer_range=0.06,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
    )


def randomize(model, cfg, gen):
    """Gives the parameters the initialiser leaves constant real values, so every path carries weight."""
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            if "inv_freq" in name:
                continue
            if name.endswith("tid2eid"):
                rows = [torch.randperm(cfg.n_routed_experts, generator=gen)[: cfg.num_experts_per_tok]
                        for _ in range(cfg.vocab_size)]
                p.copy_(torch.stack(rows).to(p.dtype))
            elif "sinks" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            elif "position_bias" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            elif "e_score_correction_bias" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".base") or name.endswith("hc_base"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".scale") or name.endswith("hc_scale"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=gen))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            if p.is_floating_point():
                p.copy_(p.to(torch.bfloat16).to(p.dtype))  # exactly representable in the bf16 shards


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seq", type=int, default=1100)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--shard", default="10MB")
    args = ap.parse_args()
    torch.manual_seed(1234)
    gen = torch.Generator().manual_seed(1234)
    cfg = make_config()
    cfg._attn_implementation = "eager"
    model = DeepseekV4ForCausalLM(cfg).float().eval()
    randomize(model, cfg, gen)
    os.makedirs(args.out, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(args.out, max_shard_size=args.shard)

    ref = DeepseekV4ForCausalLM.from_pretrained(args.out, dtype=torch.float32, attn_implementation="eager").eval()
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), generator=gen)
    picks = {}  # the indexer's top-k per CSA layer, [B, S, k], -1 = no entry
    for i, layer in enumerate(ref.model.layers):
        comp = getattr(layer.self_attn, "compressor", None)
        if comp is not None and hasattr(comp, "indexer"):
            comp.indexer.register_forward_hook(lambda m, a, out, i=i: picks.__setitem__(i, out))
    with torch.no_grad():
        logits = ref(input_ids=ids).logits.float().contiguous()
    tensors = {"input_ids": ids.to(torch.int64).contiguous(), "logits": logits}
    for i, t in picks.items():
        tensors[f"topk.{i}"] = t.to(torch.int64).contiguous()
    save_file(tensors, os.path.join(args.out, "golden.safetensors"))
    import transformers
    info = {"name": os.path.basename(os.path.normpath(args.out)), "batch": args.batch, "seq": args.seq,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "params": sum(p.numel() for p in ref.parameters()),
            "files": sorted(os.listdir(args.out))}
    with open(os.path.join(args.out, "golden.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
