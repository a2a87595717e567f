// Example: the weight-sync hook a C++ trainer calls after its optimizer step.
// Here the "trainer state" is a checkpoint directory; a LibTorch trainer passes
// `{name, dtype::bf16, shape, t.data_ptr(), t.nbytes()}` for each contiguous
// parameter instead. Usage:
//   hart serve -m tests/data/tiny-a --weight-sync-endpoint tcp://127.0.0.1:5558 &
//   weight_sync_hook CHECKPOINT_DIR tcp://127.0.0.1:5558 VERSION
#include "rollout/checkpoint_tensors.h"
#include "rollout/weight_sync_client.h"

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CHECKPOINT_DIR ENDPOINT VERSION\n", argv[0]);
    return 2;
  }
  auto ckpt = hart::checkpoint_tensors_open(argv[1]);
  if (!ckpt.ok()) {
    std::fprintf(stderr, "%s\n", ckpt.get_status().to_string().c_str());
    return 1;
  }
  hart::weight_sync_client_params p;
  p.endpoint = argv[2];
  auto client = hart::weight_sync_client::connect(p);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.get_status().to_string().c_str());
    return 1;
  }
  // One call per training step: begin, bucketed tensors, end; returns once the new version serves.
  auto r = (*client)->push(std::strtoull(argv[3], nullptr, 10), ckpt->tensors);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.get_status().to_string().c_str());  // the old version keeps serving
    return 1;
  }
  std::printf("version %llu: %.3f GB at %.2f GB/s, build %.3f s, swap %.3f s\n",
              (unsigned long long)r->version, double(r->n_bytes) * 1e-9, r->gb_per_s, r->build_s, r->swap_s);
  return 0;
}
