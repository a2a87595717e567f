// File: runtime/worker_link/step_codec.h
// Cap'n Proto encoding of the scheduler <-> worker messages (worker.capnp):
// step_plan, step_result, the worker's hello (also its heartbeat) and the
// server's configure reply. One frame per message; no header frame (the union
// tag says what it is, Hello.version guards mismatched builds).
//
// Decoding reads the frame through protocol/capnp_frame.h, as every wire does:
// a frame over max_frame_bytes or not a multiple of 8 is refused, a misaligned
// frame is copied into aligned words, ReaderOptions bound traversal and
// nesting, kj::Exception becomes a status, trailing bytes are an error.
// Failures are invalid_argument ("worker frame: ...").
//
//   HART_ASSIGN_OR_RETURN(std::vector<uint8_t> f, worker_link::encode(worker_message{plan}));
//   status_or<worker_message> m = worker_link::decode(data, size);
//   if (auto* r = std::get_if<sched::step_result>(&m.value())) ...
#pragma once

#include "runtime/core/status.h"
#include "runtime/sched/step.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace hart::worker_link {

/// Bumped on any incompatible change of worker.capnp or of what a step means.
constexpr uint32_t link_version = 2;
/// Largest frame either side accepts (a plan carries every item's page table).
constexpr size_t max_frame_bytes = size_t{64} << 20;
constexpr uint64_t traversal_limit_words = uint64_t{16} << 20;
constexpr int nesting_limit = 16;

/// What a worker serves; compared field by field by the server.
struct model_summary {
  int64_t vocab_size = 0, hidden_size = 0, n_layers = 0, window = 0;
  std::string precision;
  bool deterministic = false;

  bool operator==(const model_summary& o) const {
    return vocab_size == o.vocab_size && hidden_size == o.hidden_size && n_layers == o.n_layers &&
           window == o.window && precision == o.precision && deterministic == o.deterministic;
  }
  bool operator!=(const model_summary& o) const { return !(*this == o); }
  std::string to_string() const;
};

struct worker_hello {
  uint32_t version = link_version;
  int64_t pid = 0;
  model_summary model;
  int64_t page_size = 0;  // 0 before configure
  std::string token;      // the per-spawn secret from HART_WORKER_TOKEN (remote_worker checks it)
};

struct worker_configure {
  int64_t page_size = 0, n_full_pages = 0, n_swa_pages = 0;
  int64_t heartbeat_ms = 0;  // the worker's heartbeat period during a step; 0: none
};

struct worker_bye {};

/// Sent by a worker every heartbeat_ms while it runs step `step`.
struct worker_heartbeat {
  uint64_t step = 0;
};

using worker_message = std::variant<worker_hello, worker_configure, sched::step_plan, sched::step_result,
                                    worker_bye, worker_heartbeat>;

/// Fails only when Cap'n Proto cannot represent the message.
status_or<std::vector<uint8_t>> encode(const worker_message& m);
/// Never throws; `data` need not be aligned and must stay valid only during the call.
status_or<worker_message> decode(const void* data, size_t size);

}  // namespace hart::worker_link
