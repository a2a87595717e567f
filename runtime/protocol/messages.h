// File: runtime/protocol/messages.h
// Plain C++ mirrors of the wire schema (hart.capnp), free of Cap'n Proto types, so the
// scheduler and the actors can hold, copy and inspect them. codec.h converts them to and
// from frames. Field meanings, units and limits are in docs/protocol.md.
//
//   protocol::generate_request g;
//   g.request_id = 7;
//   g.prompt_kind = protocol::prompt_kind::token_ids;
//   g.token_ids = {1, 2, 3};
//   protocol::request r = g;
#pragma once

#include "runtime/core/histogram.h"
#include "runtime/core/status.h"

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace hart::protocol {

// -- frame header ----------------------------------------------------------------------------

/// Header byte 0. Bumped only for changes a v1 peer cannot ignore (docs/protocol.md).
constexpr uint8_t protocol_version = 1;

/// Header byte 1: which root the payload frame holds.
enum class frame_kind : uint8_t {
  request = 1,  ///< Request (client -> server)
  reply = 2,    ///< Reply (server -> client)
};

// -- limits (checked on decode; encode does not check, so tests can craft bad input) --------

/// Largest payload frame accepted, in bytes (before any parsing).
constexpr size_t max_frame_bytes = size_t{16} << 20;
/// Cap'n Proto traversal limit: words read per message (aliasing amplification guard).
constexpr uint64_t traversal_limit_words = uint64_t{1} << 20;
/// Routing ids one final_event carries (4 bytes each, under the traversal limit's 8 MiB).
constexpr int64_t max_routing_ids = int64_t{1} << 20;
/// Cap'n Proto pointer nesting limit; the schema itself is at most 5 deep.
constexpr int nesting_limit = 16;
/// Largest prompt in tokens (token-id prompts).
constexpr size_t max_prompt_tokens = size_t{1} << 20;
/// Largest prompt text in bytes: raw text, or all chat contents together.
constexpr size_t max_prompt_text_bytes = size_t{4} << 20;
/// Most chat messages in one request.
constexpr size_t max_chat_messages = 4096;
/// Longest chat role name in bytes.
constexpr size_t max_role_bytes = 32;
/// Most stop strings, and the longest one in bytes.
constexpr size_t max_stop_strings = 16;
constexpr size_t max_stop_string_bytes = 256;
/// Most stop token ids.
constexpr size_t max_stop_token_ids = 64;
/// Longest session id in bytes.
constexpr size_t max_session_id_bytes = 256;
/// Most samples per request (n).
constexpr uint32_t max_samples = 256;
/// Most top log-probs per token (OpenAI allows 0..20).
constexpr uint8_t max_top_logprobs = 20;
/// Largest temperature accepted.
constexpr float max_temperature = 100.0f;

// -- requests (client -> server) -------------------------------------------------------------

struct chat_message {
  chat_message() = default;
  chat_message(std::string role_, std::string content_, std::string reasoning_ = {})
      : role(std::move(role_)), content(std::move(content_)), reasoning(std::move(reasoning_)) {}

  std::string role;       ///< system | developer | user | assistant | tool
  std::string content;    ///< UTF-8
  std::string reasoning;  ///< assistant: its thinking (reasoning_content), UTF-8
};

/// DeepSeek-V4's reasoning_effort; only max changes the prompt (in thinking mode).
enum class reasoning_effort : uint8_t { standard, high, max };

enum class prompt_kind : uint8_t { token_ids, messages, text };

struct sampling_options {
  float temperature = 1.0f;       ///< >= 0; 0 = greedy
  float top_p = 1.0f;             ///< (0, 1]
  int32_t top_k = -1;             ///< -1 = off, else >= 1
  float min_p = 0.0f;             ///< [0, 1]
  bool has_seed = false;          ///< seed is meaningful only when set
  uint64_t seed = 0;              ///< sample i uses seed + i
  uint32_t max_new_tokens = 256;  ///< >= 1
  uint32_t min_new_tokens = 0;    ///< <= max_new_tokens
  std::vector<std::string> stop;  ///< stop strings (excluded from the returned text)
  std::vector<uint32_t> stop_token_ids;
  bool ignore_eos = false;
  uint32_t n = 1;            ///< samples sharing the prompt, 1..max_samples
  bool logprobs = false;     ///< return the sampled token's log-prob
  uint8_t top_logprobs = 0;  ///< and the k most likely tokens', 0..max_top_logprobs
};

struct generate_request {
  uint64_t request_id = 0;  ///< client-chosen, != 0, unique per client
  prompt_kind kind = prompt_kind::token_ids;
  std::vector<uint32_t> token_ids;     ///< when kind == token_ids
  std::vector<chat_message> messages;  ///< when kind == messages
  std::string text;                    ///< when kind == text
  sampling_options sampling;
  std::string session_id;             ///< empty = none
  int32_t priority = 0;               ///< larger = sooner
  bool return_routing = false;        ///< final_event::routing (the prompt is computed, not cached)
  bool return_indexer_picks = false;  ///< with return_routing: the indexer picks too (large)
  /// >= 0: final_event::input_logprobs from this prompt position (the prompt is computed, not
  /// cached); with sampling.max_new_tokens 0 the prompt is only scored.
  int64_t logprob_start = -1;
  /// kind == messages: DeepSeek-V4's thinking mode (the prompt ends "<think>") or chat mode ("</think>").
  bool thinking = false;
  reasoning_effort effort = reasoning_effort::standard;
};

enum class control_verb : uint8_t {
  abort,  ///< uses request_id or all
  pause,  ///< uses mode
  resume,
  flush_cache,
  health,
  stats,
  weight_version,
};

enum class pause_mode : uint8_t { abort, retract, in_place };

struct control_request {
  uint64_t tag = 0;  ///< client correlation id, echoed in the reply
  control_verb verb = control_verb::health;
  uint64_t request_id = 0;              ///< abort: the generation to abort (when !all)
  bool all = false;                     ///< abort: every generation of this client
  pause_mode mode = pause_mode::abort;  ///< pause
};

using request = std::variant<generate_request, control_request>;

// -- replies (server -> client) --------------------------------------------------------------

struct token_logprob {
  uint32_t token_id = 0;
  float logprob = 0.0f;  ///< natural log
};

struct chunk_event {
  uint64_t request_id = 0;
  uint32_t sample_index = 0;
  uint32_t seq = 0;  ///< 0, 1, 2, ... per (request_id, sample_index)
  std::vector<uint32_t> token_ids;
  std::string text;                                      ///< UTF-8-safe delta
  std::vector<float> logprobs;                           ///< empty or one per token id
  std::vector<std::vector<token_logprob>> top_logprobs;  ///< empty or one list per token id
  uint64_t weight_version = 0;
  uint64_t server_time_us = 0;  ///< CLOCK_MONOTONIC µs when the producing step ended; 0 = unknown
};

enum class finish_reason : uint8_t { stop, length, abort, error };

/// "stop" | "length" | "abort" | "error": the name clients see (JSON lines, OpenAI's finish_reason).
inline const char* finish_reason_name(finish_reason r) {
  switch (r) {
    case finish_reason::stop:
      return "stop";
    case finish_reason::length:
      return "length";
    case finish_reason::abort:
      return "abort";
    case finish_reason::error:
      return "error";
  }
  return "error";
}

struct usage_info {
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  uint32_t cached_tokens = 0;
};

struct timing_info {
  uint64_t queue_us = 0;
  uint64_t ttft_us = 0;
  uint64_t total_us = 0;
};

/// One layer's routing of a sample: ids [positions, k], position-major.
struct layer_routing {
  uint32_t layer = 0;
  uint32_t k = 0;
  std::vector<int32_t> ids;
};

/// generate_request::return_routing: every position the model computed (the
/// prompt and the generated tokens but the last), per MoE layer the routed
/// experts, per CSA layer the indexer's top-k entries (-1 = none).
struct routing_info {
  uint32_t positions = 0;
  std::vector<layer_routing> experts;
  std::vector<layer_routing> picks;
};

struct final_event {
  uint64_t request_id = 0;
  uint32_t sample_index = 0;
  finish_reason reason = finish_reason::stop;
  usage_info usage;
  timing_info timings;
  uint64_t weight_version = 0;
  std::string error_message;  ///< set when reason == error
  routing_info routing;       ///< empty unless requested
  /// > 0: the routing did not fit one message and came before this final in
  /// that many routing_part replies (routing_assembler puts it back here).
  uint32_t routing_parts = 0;
  /// generate_request::logprob_start >= 0: each prompt token's log-prob from it (NaN at position 0).
  std::vector<float> input_logprobs;
};

/// Positions [first_position, first_position + routing.positions) of a
/// sample's routing, sent before its final when the whole is over the
/// per-message limit.
struct routing_part {
  uint64_t request_id = 0;
  uint32_t sample_index = 0;
  uint32_t first_position = 0;
  routing_info routing;
};

struct error_reply {
  uint64_t tag = 0;         ///< the request's tag when known, else 0
  uint64_t request_id = 0;  ///< the generation it concerns, or 0
  status_code code = status_code::internal;
  std::string message;
};

struct ack_reply {
  uint64_t tag = 0;
  control_verb verb = control_verb::abort;  ///< abort | pause | resume | flush_cache
  uint32_t affected = 0;
};

struct health_reply {
  uint64_t tag = 0;
  bool ok = true;
  uint64_t uptime_us = 0;
};

struct stats_reply {
  uint64_t tag = 0;
  std::vector<std::pair<std::string, double>> entries;
  std::string prometheus;
  /// Latency histograms since start (time_to_first_token_seconds, ...).
  std::vector<std::pair<std::string, latency_histogram>> histograms;
};

struct weight_version_reply {
  uint64_t tag = 0;
  uint64_t version = 0;
};

using reply = std::variant<chunk_event, final_event, error_reply, ack_reply, health_reply, stats_reply,
                           weight_version_reply, routing_part>;

/// Builds the error reply for a failed status (code and message copied).
error_reply error_reply_from(const status& s, uint64_t request_id = 0, uint64_t tag = 0);

}  // namespace hart::protocol
