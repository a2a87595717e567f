#!/usr/bin/env python3
"""The Hugging Face peer of `hart bench`'s decode rows (issue 5, D1).

Builds transformers' DeepseekV4ForCausalLM with V4-Flash's dims and hart bench's
layer pattern (SWA, CSA, HCA, CSA; the first routed by hash), random bf16
weights on the GPU, prefills CONTEXT tokens of one sequence, then times decode
steps of one token with its cache (median), and prints one table row per
context in hart bench's units. Needs a transformers with DeepSeek-V4 (5.x).

  python3 scripts/gpu/hf_peer_decode.py [--context 512,4096] [--steps 5]
"""
import argparse
import statistics
import sys
import time


def flash_config(transformers, layers):
    kinds = ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
             "compressed_sparse_attention"]
    layer_types = [kinds[i] if i < 4 else kinds[1 + i % 2] for i in range(layers)]
    return transformers.DeepseekV4Config(
        vocab_size=129280, hidden_size=4096, num_hidden_layers=layers, num_attention_heads=64,
        num_key_value_heads=1, head_dim=512, qk_rope_head_dim=64, partial_rotary_factor=64 / 512,
        q_lora_rank=1024, o_groups=8, o_lora_rank=1024, n_routed_experts=256, n_shared_experts=1,
        num_experts_per_tok=6, moe_intermediate_size=2048, index_n_heads=64, index_head_dim=128,
        index_topk=512, sliding_window=128,
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
        layer_types=layer_types, mlp_layer_types=["hash_moe"] + ["moe"] * (layers - 1),
        hc_mult=4, hc_sinkhorn_iters=20, scoring_func="sqrtsoftplus", swiglu_limit=10.0,
        num_nextn_predict_layers=0, tie_word_embeddings=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", default="512,4096")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    import torch
    import transformers
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    if not hasattr(transformers, "DeepseekV4ForCausalLM"):
        print("this transformers has no DeepseekV4ForCausalLM: no peer")
        return 1
    cfg = flash_config(transformers, a.layers)
    t0 = time.time()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = transformers.DeepseekV4ForCausalLM(cfg).eval()
    torch.cuda.synchronize()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"built {a.layers} layers, {n_params / 1e9:.2f} B parameters (bf16) in {time.time() - t0:.1f} s")
    print("| peer | batch | context | step (us) | per layer (us) |")
    print("|---|---|---|---|---|")
    gen = torch.Generator(device="cuda").manual_seed(1)
    for ctx in [int(c) for c in a.context.split(",")]:
        try:
            ids = torch.randint(2, cfg.vocab_size, (1, ctx), device="cuda", generator=gen)
            with torch.no_grad():
                out = model(input_ids=ids, use_cache=True)
                cache = out.past_key_values
                nxt = out.logits[:, -1:].argmax(-1)
                times = []
                for _ in range(a.steps + 1):
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
                    torch.cuda.synchronize()
                    times.append((time.perf_counter() - t) * 1e6)
                    cache, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
            us = statistics.median(times[1:])
            print(f"| HF transformers eager bf16 | 1 | {ctx} | {us:.1f} | {us / a.layers:.1f} |")
        except Exception as e:  # report and go on: the peer is a reference, not a gate
            print(f"| HF transformers eager bf16 | 1 | {ctx} | failed: {type(e).__name__}: {str(e)[:200]} | |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
