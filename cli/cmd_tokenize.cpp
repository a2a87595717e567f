// `hart tokenize`: text → ids (one line, space separated), or ids → text.
#include "cli/cli_common.h"
#include "runtime/text/chat_template.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <sstream>

namespace hart::cli {

CLI::App* add_tokenize_command(CLI::App& app, tokenize_options* o) {
  CLI::App* cmd = app.add_subcommand("tokenize", "Text to token ids, or ids back to text with --decode");
  add_common(cmd, &o->common);
  cmd->add_option("text", o->text, "Text to encode");
  cmd->add_option("--decode", o->decode_ids, "Comma-separated ids to decode instead");
  cmd->add_flag("--chat", o->chat, "Encode the text as one user message with the chat template");
  return cmd;
}

int run_tokenize(const tokenize_options& o) {
  auto tok = load_tokenizer(o.common.model_dir);
  if (!tok.ok()) return fail(tok.get_status());
  if (!o.decode_ids.empty()) {
    std::vector<int32_t> ids;
    std::stringstream ss(o.decode_ids);
    std::string item;
    while (std::getline(ss, item, ',')) {
      try {
        size_t used = 0;
        const long v = std::stol(item, &used);
        if (used != item.size()) throw std::invalid_argument(item);
        ids.push_back(int32_t(v));
      } catch (const std::exception&) {
        return fail(invalid_argument("--decode: '%s' is not an integer id", item.c_str()));
      }
    }
    auto text = tok->decode(ids);
    if (!text.ok()) return fail(text.get_status());
    std::printf("%s\n", text->c_str());
    return 0;
  }
  std::string text = o.text;
  if (o.chat) {
    auto enc = chat_encode({{"user", o.text}}, chat_options{});
    if (!enc.ok()) return fail(enc.get_status());
    text = *enc;
  }
  auto ids = tok->encode(text);
  if (!ids.ok()) return fail(ids.get_status());
  for (size_t i = 0; i < ids->size(); ++i) std::printf("%s%d", i ? " " : "", (*ids)[i]);
  std::printf("\n");
  return 0;
}

}  // namespace hart::cli
