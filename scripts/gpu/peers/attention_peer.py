#!/usr/bin/env python3
# PyTorch eager peer of the sparse decode attention (A1): bf16 gather of pre-dequantized entries + einsum +
# softmax with the sink. One line per case.
# Run on the GPU machine (torch with CUDA); prints to stdout.
import torch
cases = [(1, 64, 640), (8, 64, 640), (32, 64, 640), (128, 64, 640), (1, 128, 1152), (128, 128, 1152),
         (1, 64, 160), (1, 64, 2176), (1, 64, 8320), (1, 64, 128)]
for b, h, n in cases:
    pool = torch.randn(200000, 512, device="cuda", dtype=torch.bfloat16)
    sets = [(torch.randn(b, h, 512, device="cuda", dtype=torch.bfloat16),
             torch.randint(0, pool.shape[0], (b, n), device="cuda")) for _ in range(4)]
    sink = torch.randn(h, device="cuda")
    def attn(q, idx):
        kv = pool[idx]                                   # [b, n, 512]
        s = torch.einsum("bhd,bnd->bhn", q.float(), kv.float()) * 512 ** -0.5
        s = torch.cat([s, sink.view(1, h, 1).expand(b, h, 1)], dim=-1)
        p = torch.softmax(s, dim=-1)[..., :-1]
        return torch.einsum("bhn,bnd->bhd", p, kv.float()).to(torch.bfloat16)
    for i in range(10): attn(*sets[i % 4])
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for i in range(100): attn(*sets[i % 4])
    e.record(); torch.cuda.synchronize()
    print(b, h, n, f"{s.elapsed_time(e) * 10:.2f}", flush=True)
