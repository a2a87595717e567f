#!/usr/bin/env bash
# Flash compressor (issue 6, C1) on the GPU machine: builds the bench with nvcc
# directly (no CMake on the GPU image), times a PyTorch eager peer of the same
# math (fp32 projections → per-channel softmax pooling with the position bias,
# CSA A/B overlap, RMSNorm, RoPE, FP8 QDQ of the main entries, Hadamard + FP4
# QDQ of the indexer keys, like the HF compressor plus the reference's QDQ),
# runs compute-sanitizer on the checks, then the bench (checks against the CPU
# reference, then times T = 4K..1M). The table is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
LOG=${OUT:-/tmp}
SRCS="kernels/flash_compressor/flash_compressor_bench.cu kernels/flash_compressor/flash_compressor.cu kernels/flash_compressor/flash_compressor_cpu.cpp kernels/flash_compressor/flash_compressor_args.cpp kernels/compress_pool/compress_pool_cpu.cpp kernels/rms_norm/rms_norm_cpu.cpp kernels/rope/rope_cpu.cpp kernels/quant/quant_cpu.cpp kernels/quant/quant_args.cpp kernels/sparse_decode_attention/kv_entry.cpp runtime/core/codecs.cpp runtime/core/status.cpp runtime/core/check.cpp runtime/core/log.cpp"
NVCC="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. -DHART_CUDA=1 -Xptxas -v"
t0=$(date +%s)
$NVCC $SRCS -o /tmp/fc_bench > "$LOG/fc_build.log" 2>&1 &
pa=$!
PYTHONUNBUFFERED=1 python3 - > /tmp/fc_peer.txt <<'PY'
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
PY
echo "torch peer:"; cat /tmp/fc_peer.txt
wait $pa || { echo "build failed"; cat "$LOG/fc_build.log"; exit 1; }
echo "build done after $(( $(date +%s) - t0 )) s"; grep -E "registers|spill" "$LOG/fc_build.log" | head -8
if [ "${FC_SANITIZE:-1}" != 0 ] && command -v compute-sanitizer >/dev/null; then
  timeout 300 compute-sanitizer --tool memcheck --print-limit 5 /tmp/fc_bench --check-only 2>&1 \
    | grep -E "check|ERROR SUMMARY|Invalid" | head -16
fi
timeout 500 /tmp/fc_bench /tmp/fc_peer.txt 2>&1 | tee "$LOG/fc_bench.log"
if [ "${FC_NCU:-1}" != 0 ] && command -v ncu >/dev/null; then
  timeout 120 ncu --clock-control none -k regex:fc_prefill --launch-skip 30 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy /tmp/fc_bench --only csa --T 65536 \
    > "$LOG/fc_ncu_csa.log" 2>&1
  echo "ncu csa:"; grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers" "$LOG/fc_ncu_csa.log" | head -10
fi
