#!/usr/bin/env python3
# PyTorch eager peer of the Flash compressor (C1): fp32 projections -> per-channel softmax pooling with the
# position bias, CSA A/B overlap, RMSNorm, RoPE, the FP8 / Hadamard + FP4 QDQ. One line per case: layer T us.
# Run on the GPU machine (torch with CUDA); prints to stdout.
import torch
dev = "cuda"
E4M3 = torch.float8_e4m3fn
FP4 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], device=dev)
MID = (FP4[1:] + FP4[:-1]) / 2

def pow2_scale(amax, qmax):
    return torch.exp2(torch.ceil(torch.log2(amax / qmax)))

def fp8_qdq(x, block=64):
    xb = x.view(*x.shape[:-1], -1, block)
    s = pow2_scale(xb.abs().amax(-1, keepdim=True).clamp(min=1e-4), 448.0)
    return ((xb / s).clamp(-448, 448).to(E4M3).float() * s).view_as(x)

def fp4_qdq(x, block=32):
    xb = x.view(*x.shape[:-1], -1, block)
    s = pow2_scale(xb.abs().amax(-1, keepdim=True).clamp(min=6 * 2.0 ** -126), 6.0)
    y = (xb / s).clamp(-6, 6)
    q = FP4[torch.bucketize(y.abs(), MID)] * y.sign()   # ties go down here: a peer, not a reference
    return (q * s).view_as(x)

def hadamard(n):
    h = torch.ones(1, 1, device=dev)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / n ** 0.5

def compress(kv, gate, ape, m, c, overlap, norm, freqs, rope=64):
    nb = kv.shape[0] // m
    kv = kv[: nb * m].view(nb, m, -1)
    sc = gate[: nb * m].view(nb, m, -1) + ape
    if overlap:
        kva, kvb, sa, sb = kv[..., :c], kv[..., c:], sc[..., :c], sc[..., c:]
        kva = torch.cat([torch.zeros_like(kva[:1]), kva[:-1]])
        sa = torch.cat([torch.full_like(sa[:1], float("-inf")), sa[:-1]])
        kv, sc = torch.cat([kva, kvb], 1), torch.cat([sa, sb], 1)
    out = (kv * sc.softmax(1)).sum(1)
    out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + 1e-6) * norm
    ang = (torch.arange(nb, device=dev, dtype=torch.float32) * m)[:, None] * freqs
    cos, sin = ang.cos(), ang.sin()
    a, b = out[:, -rope::2], out[:, -rope + 1::2]
    r = torch.stack([a * cos - b * sin, b * cos + a * sin], -1).flatten(1)
    return torch.cat([out[:, :-rope], r], 1)

freqs = 160000.0 ** (-torch.arange(0, 64, 2, device=dev, dtype=torch.float32) / 64)
H128 = hadamard(128)
def csa(x):
    kv, g, kvi, gi, ape, apei, nm, nmi = x
    e = compress(kv, g, ape, 4, 512, True, nm, freqs)
    e = torch.cat([fp8_qdq(e[:, :448]), e[:, 448:]], 1)
    k = fp4_qdq(compress(kvi, gi, apei, 4, 128, True, nmi, freqs) @ H128)
    return e, k
def hca(x):
    kv, g, ape, nm = x
    e = compress(kv, g, ape, 128, 512, False, nm, freqs)
    return torch.cat([fp8_qdq(e[:, :448]), e[:, 448:]], 1)

T = 4096
while T <= (1 << 20):
    for kind in ("csa", "hca"):
        try:
            if kind == "csa":
                x = (torch.randn(T, 1024, device=dev), torch.randn(T, 1024, device=dev), torch.randn(T, 256, device=dev),
                     torch.randn(T, 256, device=dev), torch.randn(4, 1024, device=dev), torch.randn(4, 256, device=dev),
                     torch.randn(512, device=dev), torch.randn(128, device=dev))
                f = csa
            else:
                x = (torch.randn(T, 512, device=dev), torch.randn(T, 512, device=dev), torch.randn(128, 512, device=dev),
                     torch.randn(512, device=dev))
                f = hca
            for _ in range(3): f(x)
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            n = 10
            s.record()
            for _ in range(n): f(x)
            e.record(); torch.cuda.synchronize()
            print(kind, T, f"{s.elapsed_time(e) * 1000 / n:.1f}", flush=True)
        except torch.OutOfMemoryError:
            print(kind, T, "oom", flush=True)
        x = None
        torch.cuda.empty_cache()
    T *= 4
