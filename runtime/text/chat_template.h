// File: runtime/text/chat_template.h
// DeepSeek chat encoding in plain C++ (no Jinja): messages to the prompt text that
// tokenizer::encode() then turns into ids, the special markers becoming single ids.
//
//   chat_options opt;
//   opt.thinking = thinking_mode::think;
//   HART_ASSIGN_OR_RETURN(std::string prompt, chat_encode({{"user", "hi"}}, opt));
//   // "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>"
#pragma once

#include "runtime/core/status.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hart {

/// The DeepSeek special-token spellings chat_encode() writes.
namespace chat_tokens {
inline constexpr std::string_view bos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view eos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view user = "<｜User｜>";
inline constexpr std::string_view assistant = "<｜Assistant｜>";
inline constexpr std::string_view think_begin = "<think>";
inline constexpr std::string_view think_end = "</think>";
/// DeepSeek-V4's instruction for reasoning_effort "max", before the first message in thinking mode.
inline constexpr std::string_view reasoning_effort_max =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the "
    "root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";
}  // namespace chat_tokens

/// `role` is "system", "user" or "assistant"; `reasoning` an assistant turn's thinking
/// (OpenAI's reasoning_content), rendered only where DeepSeek-V4 keeps it.
struct chat_message {
  chat_message() = default;
  chat_message(std::string role_, std::string content_, std::string reasoning_ = {})
      : role(std::move(role_)), content(std::move(content_)), reasoning(std::move(reasoning_)) {}

  std::string role;
  std::string content;
  std::string reasoning;
};

/// none: the DeepSeek tokenizer_config.json template (V3), no thinking markers. think /
/// no_think: DeepSeek-V4's encoding (encoding_dsv4.py) in thinking / chat mode: every user turn
/// that an assistant answers ends "<｜Assistant｜>" + "<think>" (thinking, from the last user
/// turn on) or "</think>".
enum class thinking_mode { none, think, no_think };

struct chat_options {
  bool add_generation_prompt = true;             // end with "<｜Assistant｜>"
  thinking_mode thinking = thinking_mode::none;  // needs add_generation_prompt
  /// V4 thinking mode only: the "max" reasoning effort's instruction first (chat_tokens::
  /// reasoning_effort_max); "high" and the default render alike.
  bool reasoning_effort_max = false;
  std::string bos_token{chat_tokens::bos};  // e.g. tokenizer_config::bos_token
};

/// bos_token, then per message.
/// thinking == none (byte-for-byte the chat_template of the DeepSeek tokenizer_config.json):
/// system -> content; user -> "<｜User｜>" + content; assistant -> "<｜Assistant｜>" + content +
/// "<｜end▁of▁sentence｜>"; then, with add_generation_prompt, "<｜Assistant｜>".
/// think / no_think (DeepSeek-V4, drop_thinking as its default): system -> content; user ->
/// "<｜User｜>" + content, and when an assistant turn follows (or it is the last message)
/// "<｜Assistant｜>" + the marker ("<think>" in thinking mode from the last user turn on, else
/// "</think>"); assistant -> [reasoning + "</think>" in thinking mode after the last user turn]
/// + content + "<｜end▁of▁sentence｜>"; a conversation that does not end with a user turn gets
/// "<｜Assistant｜>" + the marker with add_generation_prompt.
/// invalid_argument for an unknown role (named in the message) or for a thinking marker
/// without add_generation_prompt.
status_or<std::string> chat_encode(const std::vector<chat_message>& messages, const chat_options& options);

/// Parses `[{"role": "...", "content": "..."}, ...]`. `content` may also be an array of
/// `{"type": "text", "text": "..."}` parts, which are concatenated. invalid_argument naming the
/// offending message on malformed input; roles are checked by chat_encode(), not here.
status_or<std::vector<chat_message>> chat_messages_from_json(std::string_view json_text);

/// Name of a thinking mode: "none", "think", "no_think".
const char* thinking_mode_name(thinking_mode m);

}  // namespace hart
