// piece_pool: every piece runs exactly once, on the threads the contract names,
// for piece counts below, at and above the thread count, run after run.
#include "runtime/core/piece_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <set>
#include <vector>

namespace hart {
namespace {

TEST(piece_pool, runs_every_piece_once_on_its_thread) {
  for (int threads : {1, 2, 3, 4}) {
    piece_pool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (size_t k : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(4), size_t(7), size_t(64)}) {
      for (int rep = 0; rep < 3; ++rep) {
        std::vector<std::atomic<int>> count(k);
        std::vector<std::thread::id> who(k);
        pool.run(k, [&](size_t i) {
          count[i].fetch_add(1);
          who[i] = std::this_thread::get_id();
        });
        std::map<size_t, std::set<std::thread::id>> by_slot;  // piece i % threads: one thread
        for (size_t i = 0; i < k; ++i) {
          ASSERT_EQ(count[i].load(), 1) << "threads=" << threads << " k=" << k << " piece " << i;
          by_slot[i % size_t(threads)].insert(who[i]);
        }
        for (const auto& [slot, ids] : by_slot) EXPECT_EQ(ids.size(), 1u) << "slot " << slot;
        if (k > 0) {
          EXPECT_EQ(who[0], std::this_thread::get_id()) << "piece 0 runs on the caller";
        }
      }
    }
  }
}

TEST(piece_pool, zero_or_negative_threads_run_on_the_caller) {
  piece_pool pool(0);
  EXPECT_EQ(pool.threads(), 1);
  std::vector<std::thread::id> who(5);
  pool.run(5, [&](size_t i) { who[i] = std::this_thread::get_id(); });
  for (const auto& id : who) EXPECT_EQ(id, std::this_thread::get_id());
}

}  // namespace
}  // namespace hart
