// File: runtime/pd_link/pd_messages.h
// Plain C++ mirrors of pd.capnp: the messages of one prefill/decode hand-off
// (docs/pd.md), free of Cap'n Proto types. pd_codec.h turns them into frames.
//
//   pd_message m{request_id, transfer_id, kv_chunk{std::move(kv)}};
//   HART_ASSIGN_OR_RETURN(std::vector<uint8_t> frame, pd_link::encode(m));
#pragma once

#include "runtime/model/kv_transfer.h"
#include "runtime/protocol/messages.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace hart::pd_link {

/// Bumped on any incompatible change of pd.capnp or of what a message means.
constexpr uint32_t link_version = 2;
/// Largest frame either side accepts (docs/pd.md: a chunk is whole pages within it).
constexpr size_t max_frame_bytes = size_t{64} << 20;
/// KV bytes one kv_chunk may carry (kv_pages_plan's limit): the frame less room for the header.
constexpr size_t max_chunk_kv_bytes = max_frame_bytes - (size_t{64} << 10);
/// Cap'n Proto traversal limit: twice a full frame's words (the KV is read once).
constexpr uint64_t traversal_limit_words = 2 * (max_frame_bytes / 8);
constexpr int nesting_limit = 16;
/// Longest kv_refuse message.
constexpr size_t max_refuse_message_bytes = 4096;

/// decode -> prefill: compute this prompt's KV and its first token.
struct prefill_request {
  std::vector<int32_t> tokens;          // the whole prompt, 1..protocol::max_prompt_tokens
  protocol::sampling_options sampling;  // the generate's; the prefill server samples the first token
  int64_t skip_full = 0;                // full pages the decode side holds (a prefix hit there)
  uint64_t layout = 0;                  // the decode side's kv_store::layout_id and page size: a
  int64_t page_size = 0;                // prefill server of another refuses before computing
};

/// prefill -> decode: one page range of the KV.
struct kv_chunk {
  kv_pages kv;
};

/// prefill -> decode: every chunk is sent; the first token.
struct kv_done {
  int32_t first_token = 0;
  float first_logprob = 0.0f;   // under the distribution it was sampled from
  uint64_t weight_version = 0;  // the weights that computed the KV and the token
  uint32_t n_chunks = 0;        // kv_chunk messages sent before this one
  /// The prefill's sampling.top_logprobs most likely first tokens, most likely first
  /// (at most protocol::max_top_logprobs; each a log-probability).
  std::vector<protocol::token_logprob> first_top_logprobs;
};

/// decode -> prefill: the KV is in; the prefill server may free its pages.
struct kv_ack {};

enum class refuse_reason : uint8_t {
  layout_mismatch,   ///< pages laid out for another model or page size
  bad_chunk,         ///< a chunk's header or sizes do not hold together, or chunks are missing
  unknown_transfer,  ///< no transfer of that id is expected
  aborted,           ///< the request ended on the decode side
};
inline const char* refuse_reason_name(refuse_reason r) {
  switch (r) {
    case refuse_reason::layout_mismatch:
      return "layout_mismatch";
    case refuse_reason::bad_chunk:
      return "bad_chunk";
    case refuse_reason::unknown_transfer:
      return "unknown_transfer";
    case refuse_reason::aborted:
      return "aborted";
  }
  return "?";
}

/// decode -> prefill: the transfer is over without the KV; both sides free its pages.
struct kv_refuse {
  refuse_reason reason = refuse_reason::bad_chunk;
  std::string message;  // at most max_refuse_message_bytes
};

using pd_body = std::variant<prefill_request, kv_chunk, kv_done, kv_ack, kv_refuse>;

struct pd_message {
  uint64_t request_id = 0;   // != 0
  uint64_t transfer_id = 0;  // != 0, chosen by the decode side
  pd_body body;
};

}  // namespace hart::pd_link
