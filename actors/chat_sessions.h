// File: actors/chat_sessions.h
// Prefix reuse across chat turns (GenerateRequest.sessionId, docs/protocol.md §4.1). A chat
// client sends the whole conversation each turn as text; re-encoding the model's previous answer
// from its text need not give back the token ids it generated (a byte-level BPE has many
// spellings of one string), so the prefix cache would miss from the first such token on. The
// gateway remembers, per session, the last turn's messages, its prompt ids and the answer's ids
// and text. When the next turn's messages are those plus an assistant message equal to that
// answer plus new messages, its prompt is the remembered ids, the end-of-answer marker the
// template writes, then the new messages encoded: every token of the previous turn is a cache hit.
//
//   chat_sessions s(tok, 4096, 1 << 25);
//   auto ids = s.continuation("s1", messages);   // std::nullopt: encode the whole conversation
//   ... the turn runs ...
//   s.remember("s1", messages, prompt, answer_ids, answer_text, reason);
#pragma once

#include "runtime/protocol/messages.h"
#include "runtime/sched/request.h"
#include "runtime/text/tokenizer.h"

#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hart::actors {

class chat_sessions {
 public:
  /// `tok` must outlive this; at most `capacity` sessions and `max_tokens` remembered token ids
  /// in all are kept (the least recently used sessions dropped first).
  chat_sessions(const tokenizer* tok, size_t capacity, size_t max_tokens);

  /// The prompt ids of `messages` as a continuation of session `id`'s last turn, or nullopt
  /// when they do not continue it (or the turn cannot be continued: it ended on a stop string
  /// or another stop id, or its answer was cut by an abort or error). Errors: the new messages'
  /// encoding (an unknown role).
  status_or<std::optional<std::vector<int32_t>>> continuation(
      const std::string& id, const std::vector<protocol::chat_message>& messages);

  /// Records a finished turn of session `id`: its messages, its prompt ids, the answer's ids and
  /// text as streamed, and why it ended.
  void remember(const std::string& id, std::vector<protocol::chat_message> messages,
                std::vector<int32_t> prompt, const std::vector<int32_t>& answer_ids, std::string answer_text,
                sched::finish_reason reason);

  size_t size() const { return sessions_.size(); }
  size_t tokens() const { return tokens_; }

 private:
  struct turn {
    std::vector<protocol::chat_message> messages;
    std::vector<int32_t> ids;  // prompt, answer, end-of-answer marker: as the template continues it
    std::string answer;
    std::list<std::string>::iterator lru;
  };
  /// Forgets session `it` (its LRU entry and its tokens).
  void erase(std::map<std::string, turn>::iterator it);

  const tokenizer* tok_;
  size_t capacity_, max_tokens_;
  size_t tokens_ = 0;                   // ids held by all sessions
  std::vector<int32_t> end_of_answer_;  // the template's end-of-sentence marker as ids
  std::map<std::string, turn> sessions_;
  std::list<std::string> lru_;  // most recently used first
};

}  // namespace hart::actors
