// Weight-sync throughput against a running server (W1: >= 5 GB/s over loopback).
// Pushes a checkpoint's tensors plus `pad_gb` of random BF16 `mtp.*` tensors,
// which the server receives, checksums and stages like any others and then
// ignores when building (MTP weights are not used yet), so the transfer is
// measured at a size the tiny fixtures cannot reach. Each run pushes the
// next version; one line per run, with the CPU seconds this process (caller
// and ZeroMQ threads) spent on it: on a shared box the CPU cost per GB is what
// the load does not change. Usage:
//   hart serve -m tests/data/tiny-a --weight-sync-endpoint tcp://127.0.0.1:5558 &
//   weight_sync_client_bench tcp://127.0.0.1:5558 tests/data/tiny-a PAD_GB [BUCKET_MB] [RUNS] [FRAME_KB]
//   [FIRST_VERSION] [LANES] [FROM]
// FROM=cuda puts every tensor in device memory first and pushes it by CUDA IPC;
// FROM=nccl[:GPU] puts them on GPU (default 1; the server serves on 0) and
// broadcasts them by NCCL (one lane; the first run forms the group, later runs reuse it).
#include <sys/resource.h>

#ifdef HART_CUDA
#include <cuda_runtime.h>
#endif

#include "rollout/checkpoint_tensors.h"
#include "rollout/weight_sync_client.h"

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: %s ENDPOINT CHECKPOINT_DIR PAD_GB [BUCKET_MB=512] [RUNS=3] [FRAME_KB=4096] "
                 "[FIRST_VERSION=1000] [LANES=0: a quarter of the cores] [FROM=host|cuda|nccl[:GPU=1]]\n",
                 argv[0]);
    return 2;
  }
  const double pad_gb = std::atof(argv[3]);
  const uint64_t bucket_mb = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 512;
  const int runs = argc > 5 ? std::atoi(argv[5]) : 3;
  const uint64_t frame_kb = argc > 6 ? std::strtoull(argv[6], nullptr, 10) : 4096;
  // Versions must rise across invocations against one server (a warm-up run, then measured ones).
  const uint64_t first_version = argc > 7 ? std::strtoull(argv[7], nullptr, 10) : 1000;
  const int lanes = argc > 8 ? std::atoi(argv[8]) : 0;
  const std::string from = argc > 9 ? argv[9] : "host";
  const bool nccl = from == "nccl" || from.rfind("nccl:", 0) == 0;
  if (from != "host" && from != "cuda" && !nccl) {
    return std::fprintf(stderr, "FROM must be host, cuda or nccl[:GPU]\n"), 2;
  }
  auto ckpt = hart::checkpoint_tensors_open(argv[2]);
  if (!ckpt.ok()) return std::fprintf(stderr, "%s\n", ckpt.get_status().to_string().c_str()), 1;
  // 64 MiB padding tensors [4096, 8192] BF16, random bits (nothing compresses or dedups them).
  const int64_t rows = 4096, cols = 8192, bytes = rows * cols * 2;
  const int64_t n_pad = int64_t(pad_gb * 1e9 / double(bytes));
  std::vector<std::vector<uint64_t>> pad(n_pad, std::vector<uint64_t>(bytes / 8));
  std::mt19937_64 rng(1);
  for (auto& p : pad) {
    for (auto& w : p) w = rng();
  }
  std::vector<hart::tensor_ref> ts = ckpt->tensors;
  for (int64_t i = 0; i < n_pad; ++i) {
    ts.push_back({"mtp.bench." + std::to_string(i) + ".weight",
                  hart::dtype::bf16,
                  {rows, cols},
                  pad[i].data(),
                  size_t(bytes)});
  }
#ifdef HART_CUDA
  // FROM=cuda: every tensor in one device buffer, pushed by CUDA IPC (a colocated trainer);
  // FROM=nccl: the same on another GPU, broadcast by NCCL.
  void* device_copy = nullptr;
  if (from != "host") {
    const int gpu = from.size() > 5 ? std::atoi(from.c_str() + 5) : 1;
    if (nccl && cudaSetDevice(gpu) != cudaSuccess) return std::fprintf(stderr, "no CUDA device %d\n", gpu), 1;
    size_t total = 0;
    for (const hart::tensor_ref& t : ts) total += (t.n_bytes + 255) / 256 * 256;
    if (cudaMalloc(&device_copy, total) != cudaSuccess)
      return std::fprintf(stderr, "cudaMalloc of %zu bytes failed\n", total), 1;
    size_t off = 0;
    for (hart::tensor_ref& t : ts) {
      char* d = static_cast<char*>(device_copy) + off;
      if (cudaMemcpy(d, t.data, t.n_bytes, cudaMemcpyHostToDevice) != cudaSuccess)
        return std::fprintf(stderr, "upload failed\n"), 1;
      t.data = d;
      t.device = true;
      off += (t.n_bytes + 255) / 256 * 256;
    }
  }
#else
  if (from != "host") return std::fprintf(stderr, "FROM=%s needs a build with CUDA\n", from.c_str()), 2;
#endif
  hart::weight_sync_client_params p;
  p.endpoint = argv[1];
  p.bucket_bytes = bucket_mb << 20;
  p.frame_bytes = frame_kb << 10;
  p.lanes = lanes;
  if (nccl) p.device_via = hart::device_transport::nccl;
  auto client = hart::weight_sync_client::connect(p);
  if (!client.ok()) return std::fprintf(stderr, "%s\n", client.get_status().to_string().c_str()), 1;
  auto cpu_s = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  for (int r = 0; r < runs; ++r) {
    const double cpu0 = cpu_s();
    auto rep = (*client)->push(first_version + uint64_t(r), ts);
    if (!rep.ok()) return std::fprintf(stderr, "%s\n", rep.get_status().to_string().c_str()), 1;
    std::printf(
        "weight_sync_bench from=%s lanes=%d bytes=%.3fGB buckets=%lld bucket=%lluMB frame=%lluKB "
        "transfer_s=%.3f gb_per_s=%.2f build_s=%.3f swap_s=%.3f total_s=%.3f client_cpu_s=%.3f%s\n",
        from.c_str(), lanes, double(rep->n_bytes) * 1e-9, (long long)rep->n_buckets,
        (unsigned long long)bucket_mb, (unsigned long long)frame_kb, rep->transfer_s, rep->gb_per_s,
        rep->build_s, rep->swap_s, rep->total_s, cpu_s() - cpu0,
        rep->nccl_group_formed ? " nccl_group=formed" : "");
  }
  return 0;
}
