// File: tests/serve/server_stats.h
// A running server's stats by name, for the serve tests: one `stats` control verb and its
// reply (chunks, finals and other replies meanwhile are skipped; a test reading a stream
// itself asks between its reads).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>

#include "runtime/transport/client.h"

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

}  // namespace hart::testing
