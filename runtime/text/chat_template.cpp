// File: runtime/text/chat_template.cpp
#include "runtime/text/chat_template.h"

#include <nlohmann/json.hpp>

#include <new>

namespace hart {

using json = nlohmann::json;

const char* thinking_mode_name(thinking_mode m) {
  switch (m) {
    case thinking_mode::none:
      return "none";
    case thinking_mode::think:
      return "think";
    case thinking_mode::no_think:
      return "no_think";
  }
  return "unknown";
}

namespace {

// Both encodings: thinking none is the tokenizer_config.json template (V3: each assistant turn
// opens with "<｜Assistant｜>"); think / no_think DeepSeek-V4's (encoding_dsv4.py, drop_thinking:
// the "<｜Assistant｜>" and thinking marker close the user turn an assistant answers, and earlier
// turns' reasoning is dropped).
status encode(const std::vector<chat_message>& messages, const chat_options& options, std::string& out) {
  const bool v4 = options.thinking != thinking_mode::none, think = options.thinking == thinking_mode::think;
  size_t last_user = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role == "user") last_user = i;
  }
  const auto assistant_prompt = [&](size_t i) {
    out += chat_tokens::assistant;
    if (v4) out += think && i >= last_user ? chat_tokens::think_begin : chat_tokens::think_end;
  };
  if (think && options.reasoning_effort_max) out += chat_tokens::reasoning_effort_max;
  for (size_t i = 0; i < messages.size(); ++i) {
    const chat_message& m = messages[i];
    if (m.role == "system") {
      out += m.content;
    } else if (m.role == "user") {
      out += chat_tokens::user;
      out += m.content;
      const bool answered = i + 1 < messages.size() && messages[i + 1].role == "assistant";
      if (v4 && (answered || (i + 1 == messages.size() && options.add_generation_prompt)))
        assistant_prompt(i);
    } else if (m.role == "assistant") {
      if (!v4) out += chat_tokens::assistant;
      if (think && i > last_user) {
        out += m.reasoning;
        out += chat_tokens::think_end;
      }
      out += m.content;
      out += chat_tokens::eos;
    } else {
      return invalid_argument("chat_encode: message %zu has unknown role \"%s\"", i, m.role.c_str());
    }
  }
  // V4's user turn wrote it already.
  const bool prompted = v4 && !messages.empty() && messages.back().role == "user";
  if (options.add_generation_prompt && !prompted) assistant_prompt(messages.size());
  return {};
}

}  // namespace

status_or<std::string> chat_encode(const std::vector<chat_message>& messages, const chat_options& options) {
  if (options.thinking != thinking_mode::none && !options.add_generation_prompt) {
    return invalid_argument("chat_encode: thinking=%s needs add_generation_prompt",
                            thinking_mode_name(options.thinking));
  }
  size_t n_bytes = options.bos_token.size() + chat_tokens::reasoning_effort_max.size() + 64;
  for (const chat_message& m : messages) n_bytes += m.content.size() + m.reasoning.size() + 48;
  std::string out;
  out.reserve(n_bytes);
  out += options.bos_token;
  HART_RETURN_IF_ERROR(encode(messages, options, out));
  return out;
}

namespace {

// The content of message `i`: a string, or text parts concatenated.
status content_from_json(const json& c, size_t i, std::string& out) {
  if (c.is_string()) {
    out = c.get<std::string>();
    return {};
  }
  if (!c.is_array()) {
    return invalid_argument("chat messages: message %zu content is neither a string nor a list", i);
  }
  for (const json& part : c) {
    auto text = part.find("text");  // end() for a non-object
    if (!part.is_object() || part.value("type", "") != "text" || text == part.end() || !text->is_string()) {
      return invalid_argument(
          "chat messages: message %zu has a content part that is not "
          "{\"type\": \"text\", \"text\": string}",
          i);
    }
    out += text->get<std::string>();
  }
  return {};
}

}  // namespace

status_or<std::vector<chat_message>> chat_messages_from_json(std::string_view json_text) {
  json doc = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return invalid_argument("chat messages: malformed JSON");
  if (!doc.is_array()) return invalid_argument("chat messages: top level is not an array");
  try {
    std::vector<chat_message> out;
    out.reserve(doc.size());
    for (size_t i = 0; i < doc.size(); ++i) {
      const json& m = doc[i];
      if (!m.is_object()) return invalid_argument("chat messages: message %zu is not an object", i);
      auto role = m.find("role");
      if (role == m.end() || !role->is_string()) {
        return invalid_argument("chat messages: message %zu has no string \"role\"", i);
      }
      auto content = m.find("content");
      if (content == m.end()) {
        return invalid_argument("chat messages: message %zu has no \"content\"", i);
      }
      chat_message msg{role->get<std::string>(), {}};
      HART_RETURN_IF_ERROR(content_from_json(*content, i, msg.content));
      out.push_back(std::move(msg));
    }
    return out;
  } catch (const json::exception& e) {  // e.g. a non-string "type"; nothing may escape (R28)
    return invalid_argument("chat messages: %s", e.what());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("chat messages: out of memory");
  }
}

}  // namespace hart
