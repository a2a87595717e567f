// The GPU engine's KV pool sized by the memory plan (gpu_engine_params::
// memory_fraction): after load the device is in use up to the fraction (less
// than one full page short), the pool's pages are the plan's, and what cannot
// fit is refused with the numbers, everything freed. RUN_SERIAL in ctest: the
// plan counts every process's use of the device. Skips without a device.
#include "runtime/cache/memory_plan.h"
#include "runtime/gpu/device_memory.h"
#include "runtime/gpu/gpu_engine.h"
#include "runtime/model/tensor_source.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace hart::testing {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!gpu_device_available()) GTEST_SKIP() << "no CUDA device: the memory plan not checked on this machine"

std::string tiny_a() {
  return std::string(HART_TEST_DATA) + "/tiny-a";
}

gpu_engine_params planned(double fraction, int64_t max_running) {
  gpu_engine_params p;
  p.base.model_dir = tiny_a();
  p.max_context = 4096;
  p.memory_fraction = fraction;
  p.max_running = max_running;
  return p;
}

struct device_memory {
  size_t free = 0, total = 0;
};

device_memory now() {
  device_memory m;
  EXPECT_EQ(cudaMemGetInfo(&m.free, &m.total), cudaSuccess);
  return m;
}

// tiny-a's tensor bytes, as the engine's pre-load check counts them.
int64_t checkpoint_bytes() {
  auto src = checkpoint_source_open(tiny_a());
  EXPECT_TRUE(src.ok());
  int64_t n = 0;
  if (src.ok()) {
    for (const tensor_entry* t : (*src)->tensors()) n += int64_t(t->n_bytes);
  }
  return n;
}

TEST(gpu_memory_plan, the_pool_takes_what_the_fraction_leaves) {
  SKIP_WITHOUT_GPU();
  const size_t live0 = gpu::device_buffer::live_bytes();
  {
    auto e = gpu_engine::load(planned(0.5, 4));
    ASSERT_TRUE(e.ok()) << e.get_status().to_string();
    const cache::memory_plan* plan = (*e)->memory_plan();
    ASSERT_NE(plan, nullptr);
    EXPECT_EQ((*e)->full_pages(), plan->n_full_pages);
    EXPECT_EQ((*e)->swa_pages(), plan->n_swa_pages);
    // 4 running x (ceil(128 / 256) + 2) + ceil(1024 / 256) (one pass of the default 1024 tokens)
    EXPECT_EQ(plan->n_swa_pages, 4 * 3 + 4);
    EXPECT_GE(plan->n_full_pages, plan->full_pages_per_seq);
    EXPECT_GT(plan->in.weights, 0);
    EXPECT_GT(plan->in.workspaces, 0);
    // In use now: half the device, short of it by less than a page (+ the 2 MiB allocation granule).
    const device_memory m = now();
    const double used = double(m.total - m.free), want = 0.5 * double(m.total);
    EXPECT_LE(used, want + double(2 << 20)) << plan->describe();
    EXPECT_GE(used, want - double(plan->in.full_page_bytes) - double(4 << 20)) << plan->describe();
    // And it serves.
    sequence_state s = (*e)->new_sequence();
    std::vector<float> logits;
    ASSERT_TRUE((*e)->forward({{&s, {5, 6, 7, 8, 9}, logits_request::last}}, &logits).ok());
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
  EXPECT_EQ(gpu::device_buffer::live_bytes(), live0);
}

TEST(gpu_memory_plan, what_cannot_fit_is_refused_with_the_numbers_and_nothing_is_kept) {
  SKIP_WITHOUT_GPU();
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // the context, as the engine's load creates it
  const size_t live0 = gpu::device_buffer::live_bytes();
  auto e = gpu_engine::load(planned(0.9, 100000000));  // 300M SWA pages
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.get_status().code(), status_code::resource_exhausted);
  EXPECT_NE(e.get_status().message().find("--max-running 100000000"), std::string::npos)
      << e.get_status().message();
  EXPECT_EQ(gpu::device_buffer::live_bytes(), live0);

  // A budget the checkpoint fits (so the load goes ahead) but its workspaces do not: the linear
  // contexts alone hold over 64 MiB.
  const device_memory m = now();
  const double tight =
      (double(m.total - m.free) + double(checkpoint_bytes()) + double(16 << 20)) / double(m.total);
  e = gpu_engine::load(planned(tight, 4));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.get_status().code(), status_code::resource_exhausted);
  EXPECT_NE(e.get_status().message().find("nothing is left for the KV cache"), std::string::npos)
      << e.get_status().message();
  EXPECT_EQ(gpu::device_buffer::live_bytes(), live0);

  gpu_engine_params given = planned(0.9, 4);  // pages given: checked against the same budget
  given.full_pages = int64_t(1) << 40;
  given.swa_pages = 16;
  e = gpu_engine::load(given);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.get_status().code(), status_code::resource_exhausted);
  EXPECT_NE(e.get_status().message().find("do not fit"), std::string::npos) << e.get_status().message();
  EXPECT_EQ(gpu::device_buffer::live_bytes(), live0);
}

// A checkpoint larger than what the fraction leaves is refused before its weights load.
TEST(gpu_memory_plan, a_checkpoint_larger_than_the_budget_is_refused_before_loading) {
  SKIP_WITHOUT_GPU();
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // the context, as the engine's load creates it
  const int64_t ckpt = checkpoint_bytes();
  ASSERT_GT(ckpt, 1 << 20);
  const device_memory m = now();
  // Budget = what is in use + half the checkpoint's tensors.
  const double fraction = (double(m.total - m.free) + 0.5 * double(ckpt)) / double(m.total);
  auto e = gpu_engine::load(planned(fraction, 1));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.get_status().code(), status_code::resource_exhausted);
  EXPECT_NE(e.get_status().message().find("GiB of weights"), std::string::npos) << e.get_status().message();
}

}  // namespace
}  // namespace hart::testing
