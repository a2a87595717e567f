// File: runtime/text/tokenizer.h
// Byte-level BPE tokenizer loaded from a Hugging Face `tokenizer.json` (the shape DeepSeek
// V3/V4 ship: Split pre-tokenizers + ByteLevel, BPE model, ByteLevel decoder), plus a
// stream_decoder that turns generated ids into complete UTF-8 text.
//
//   HART_ASSIGN_OR_RETURN(tokenizer tok, tokenizer::load(dir + "/tokenizer.json"));
//   HART_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.encode("<｜User｜>hi"));
//   HART_ASSIGN_OR_RETURN(std::string text, tok.decode(ids));
//
// A tokenizer is immutable after load; copies share the tables, and every const method may be
// called from any number of threads.
#pragma once

#include "runtime/core/status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hart {

/// What tokenizer_config.json (next to tokenizer.json) says; empty / nullopt / false without it.
struct tokenizer_config {
  std::string bos_token, eos_token;       // e.g. "<｜begin▁of▁sentence｜>"
  std::optional<int32_t> bos_id, eos_id;  // their ids, when the vocabulary has them
  /// Whether callers should prepend bos_id to a plain encode(); chat_encode() writes the BOS
  /// text itself.
  bool add_bos_token = false;
};

class tokenizer {
 public:
  /// Loads `tokenizer_json_path`, and `tokenizer_config.json` from the same directory when that
  /// file exists. not_found for a missing tokenizer.json; invalid_argument for malformed JSON;
  /// unimplemented for a tokenizer.json using a component this class does not implement.
  static status_or<tokenizer> load(const std::string& tokenizer_json_path);

  // -- encode / decode ---

  /// Text (valid UTF-8, else invalid_argument naming the byte offset) to ids. Added tokens are
  /// split out first (leftmost, then longest match) and map to their own ids; with
  /// `parse_special` false, added tokens flagged special are encoded as plain text. Never adds
  /// BOS: see tokenizer_config. Empty text gives an empty vector.
  status_or<std::vector<int32_t>> encode(std::string_view text, bool parse_special = true) const;
  /// Ids to text. Any id outside [0, vocab_size()) is out_of_range. Byte sequences that are not
  /// valid UTF-8 come out as U+FFFD, one per maximal ill-formed subpart (as HF does). With
  /// `skip_special`, added tokens flagged special are dropped.
  status_or<std::string> decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // -- vocabulary ---

  /// One past the largest id of the vocab and the added tokens. Ids below it that no entry
  /// names (holes) decode to nothing.
  int32_t vocab_size() const;
  /// Id of `piece` spelled as in tokenizer.json: byte-level form for vocab entries ("Ġthe"),
  /// literal content for added tokens ("<｜User｜>").
  std::optional<int32_t> token_id(std::string_view piece) const;
  /// True for added tokens flagged `"special": true`; false for anything else, any id.
  bool is_special(int32_t id) const;
  /// Raw bytes `id` decodes to (may be a partial UTF-8 sequence); empty for holes and ids out
  /// of range.
  std::string_view token_bytes(int32_t id) const;

  const tokenizer_config& config() const;

 private:
  struct impl;
  explicit tokenizer(std::shared_ptr<const impl> p) : impl_(std::move(p)) {}
  std::shared_ptr<const impl> impl_;  // never null
};

/// Incremental detokenizer for generation: push() ids one at a time and get back only text
/// that is complete UTF-8; a multi-byte character split across tokens is held back until its
/// last byte arrives. Bytes that can never become valid come out as U+FFFD, so the
/// concatenation of all push() results plus flush() equals tokenizer::decode() of all ids.
/// Not thread-safe: one decoder per sequence.
class stream_decoder {
 public:
  explicit stream_decoder(const tokenizer& tok, bool skip_special = false)
      : tok_(tok), skip_special_(skip_special) {}

  /// Newly completed text (possibly empty). An id outside [0, vocab_size()) is out_of_range
  /// and leaves the decoder unchanged.
  status_or<std::string> push(int32_t id);
  /// Whatever is held back, an incomplete tail as U+FFFD; the decoder is then empty.
  std::string flush();
  /// Bytes held back, at most 3.
  size_t n_pending_bytes() const { return pending_.size(); }

 private:
  tokenizer tok_;
  bool skip_special_;
  std::string pending_;  // incomplete UTF-8 tail, raw bytes
};

}  // namespace hart
