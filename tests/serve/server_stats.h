// File: tests/serve/server_stats.h
// A running server's stats by name, for the serve tests: one `stats` control verb and its
// reply (chunks, finals and other replies meanwhile are skipped; a test reading a stream
// itself asks between its reads); the stats once a cache flush has left no page held; and a
// client connected to a server_process.
#pragma once

#include "runtime/transport/client.h"
#include "tests/serve/server_process.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>

namespace hart::testing {

inline std::map<std::string, double> stats_of(transport::client& c, uint64_t tag) {
  protocol::control_request q;
  q.tag = tag;
  q.verb = protocol::control_verb::stats;
  EXPECT_TRUE(c.send(protocol::request{q}).ok());
  for (;;) {
    auto r = c.receive(std::chrono::seconds(30));
    if (!r.ok()) {
      ADD_FAILURE() << "no stats reply: " << r.get_status().to_string();
      return {};
    }
    if (auto* s = std::get_if<protocol::stats_reply>(&*r); s && s->tag == tag) {
      return std::map<std::string, double>(s->entries.begin(), s->entries.end());
    }
  }
}

/// Flushes the cache and reads the stats until no page is held, for up to 10 s (then the
/// last stats, for the test to fail on): an aborted sequence's pages come back when the step
/// it was in completes, which may be just after one flush.
inline std::map<std::string, double> stats_after_flush(transport::client& c, uint64_t tag) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    protocol::control_request flush;
    flush.tag = tag;
    flush.verb = protocol::control_verb::flush_cache;
    EXPECT_TRUE(c.send(protocol::request{flush}).ok());
    std::map<std::string, double> st = stats_of(c, tag + 1);
    if ((st["cache_full_pages_used"] == 0 && st["cache_swa_pages_used"] == 0) ||
        std::chrono::steady_clock::now() >= deadline) {
      return st;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

/// A client of `srv` (a failed connect is recorded and aborts on use).
inline std::unique_ptr<transport::client> connect(const server_process& srv) {
  transport::client_params p;
  p.endpoint = srv.endpoint();
  auto c = transport::client::connect(p);
  EXPECT_TRUE(c.ok()) << c.get_status().to_string();
  return std::move(c).value();
}

}  // namespace hart::testing
