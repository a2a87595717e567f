#include "actors/chat_sessions.h"

#include "runtime/text/chat_template.h"

#include <algorithm>
#include <utility>

namespace hart::actors {

chat_sessions::chat_sessions(const tokenizer* tok, size_t capacity, size_t max_tokens)
    : tok_(tok), capacity_(capacity), max_tokens_(max_tokens) {
  if (tok_) {
    auto eos = tok_->encode(chat_tokens::eos);
    if (eos.ok()) end_of_answer_ = std::move(*eos);
  }
}

status_or<std::optional<std::vector<int32_t>>> chat_sessions::continuation(
    const std::string& id, const std::vector<protocol::chat_message>& messages) {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || !tok_) return std::optional<std::vector<int32_t>>{};
  const turn& t = it->second;
  const size_t n = t.messages.size();
  if (messages.size() < n + 2) return std::optional<std::vector<int32_t>>{};
  for (size_t i = 0; i < n; ++i) {
    if (messages[i].role != t.messages[i].role || messages[i].content != t.messages[i].content) {
      return std::optional<std::vector<int32_t>>{};
    }
  }
  if (messages[n].role != "assistant" || messages[n].content != t.answer)
    return std::optional<std::vector<int32_t>>{};
  // The rest as the template (DeepSeek-V4, chat mode: request_convert's) writes it after an
  // answer: no BOS, then the generation prompt.
  std::vector<chat_message> rest;
  for (size_t i = n + 1; i < messages.size(); ++i) rest.push_back({messages[i].role, messages[i].content});
  chat_options options;
  options.thinking = thinking_mode::no_think;
  options.bos_token.clear();
  HART_ASSIGN_OR_RETURN(std::string text, chat_encode(rest, options));
  HART_ASSIGN_OR_RETURN(std::vector<int32_t> tail, tok_->encode(text));
  std::vector<int32_t> ids = t.ids;
  ids.insert(ids.end(), tail.begin(), tail.end());
  lru_.splice(lru_.begin(), lru_, t.lru);
  return std::optional<std::vector<int32_t>>(std::move(ids));
}

void chat_sessions::remember(const std::string& id, std::vector<protocol::chat_message> messages,
                             std::vector<int32_t> prompt, const std::vector<int32_t>& answer_ids,
                             std::string answer_text, sched::finish_reason reason) {
  if (auto old = sessions_.find(id); old != sessions_.end()) erase(old);
  if (!tok_ || end_of_answer_.empty()) return;
  // The template closes an answer with its end-of-sentence marker: an answer that ended on it
  // has it already, one cut by max_new_tokens gets it; any other end cannot be continued.
  const bool ended_on_marker = answer_ids.size() >= end_of_answer_.size() &&
                               std::equal(end_of_answer_.begin(), end_of_answer_.end(),
                                          answer_ids.end() - std::ptrdiff_t(end_of_answer_.size()));
  if (!(reason == sched::finish_reason::length || (reason == sched::finish_reason::stop && ended_on_marker)))
    return;
  turn t;
  t.messages = std::move(messages);
  t.ids = std::move(prompt);
  t.ids.insert(t.ids.end(), answer_ids.begin(), answer_ids.end());
  if (!ended_on_marker) t.ids.insert(t.ids.end(), end_of_answer_.begin(), end_of_answer_.end());
  t.answer = std::move(answer_text);
  if (t.ids.size() > max_tokens_) return;
  tokens_ += t.ids.size();
  lru_.push_front(id);
  t.lru = lru_.begin();
  sessions_.emplace(id, std::move(t));
  while (sessions_.size() > capacity_ || tokens_ > max_tokens_) erase(sessions_.find(lru_.back()));
}

void chat_sessions::erase(std::map<std::string, turn>::iterator it) {
  tokens_ -= it->second.ids.size();
  lru_.erase(it->second.lru);
  sessions_.erase(it);
}

}  // namespace hart::actors
