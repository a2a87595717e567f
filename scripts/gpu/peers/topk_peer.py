#!/usr/bin/env python3
# torch.topk peer of Lightning top-k (T1): per-call CUDA events, launch included, rotated inputs
# (>= 192 MB of sets), median of 200. One line per case: batch n k us.
# Run on the GPU machine (torch with CUDA); prints to stdout.
import torch
cases = [(1, 16384, 512), (1, 65536, 512), (1, 262144, 512), (1, 1048576, 512),
         (64, 262144, 512), (1, 262144, 1024), (1, 262144, 2048), (64, 262144, 2048)]
for b, n, k in cases:
    sets = max(2, (192 << 20) // (b * n * 4) + 1)
    x = torch.randn(sets, b, n, device="cuda")
    for i in range(10):
        torch.topk(x[i % sets], k, dim=-1)
    ts = []
    for i in range(200):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); torch.topk(x[i % sets], k, dim=-1); e.record()
        ts.append((s, e))
    torch.cuda.synchronize()
    us = sorted(s.elapsed_time(e) * 1000 for s, e in ts)[len(ts) // 2]
    print(b, n, k, f"{us:.2f}", flush=True)
    del x
