// File: runtime/text/chat_template.h
// DeepSeek chat encoding in plain C++ (no Jinja): messages to the prompt text that
// tokenizer::encode() then turns into ids, the special markers becoming single ids.
//
//   chat_options opt;
//   opt.thinking = thinking_mode::think;
//   HART_ASSIGN_OR_RETURN(std::string prompt, chat_encode({{"user", "hi"}}, opt));
//   // "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>"
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/status.h"

namespace hart {

/// The DeepSeek special-token spellings chat_encode() writes.
namespace chat_tokens {
inline constexpr std::string_view bos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view eos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view user = "<｜User｜>";
inline constexpr std::string_view assistant = "<｜Assistant｜>";
inline constexpr std::string_view think_begin = "<think>";
inline constexpr std::string_view think_end = "</think>";
}  // namespace chat_tokens

/// `role` is "system", "user" or "assistant".
struct chat_message {
  std::string role;
  std::string content;
};

/// What follows the generation prompt (DeepSeek V3.1+/V4): nothing, "<think>" (the model
/// reasons first) or "</think>" (the model answers directly).
enum class thinking_mode { none, think, no_think };

struct chat_options {
  bool add_generation_prompt = true;             // end with "<｜Assistant｜>"
  thinking_mode thinking = thinking_mode::none;  // needs add_generation_prompt
  std::string bos_token{chat_tokens::bos};       // e.g. tokenizer_config::bos_token
};

/// bos_token, then per message: system -> content; user -> "<｜User｜>" + content;
/// assistant -> "<｜Assistant｜>" + content + "<｜end▁of▁sentence｜>"; then, with
/// add_generation_prompt, "<｜Assistant｜>" and the thinking marker. With thinking == none this
/// is byte-for-byte the chat_template of the DeepSeek tokenizer_config.json.
/// invalid_argument for an unknown role (named in the message) or for a thinking marker
/// without add_generation_prompt.
status_or<std::string> chat_encode(const std::vector<chat_message>& messages,
                                   const chat_options& options);

/// Parses `[{"role": "...", "content": "..."}, ...]`. `content` may also be an array of
/// `{"type": "text", "text": "..."}` parts, which are concatenated. invalid_argument naming the
/// offending message on malformed input; roles are checked by chat_encode(), not here.
status_or<std::vector<chat_message>> chat_messages_from_json(std::string_view json_text);

/// Name of a thinking mode: "none", "think", "no_think".
const char* thinking_mode_name(thinking_mode m);

}  // namespace hart
