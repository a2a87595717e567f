// `hart generate`: prompt or chat messages → streamed text on stdout, with
// timing on stderr.
#include "cli/cli_common.h"
#include "runtime/text/chat_template.h"
#include "runtime/worker/engine_factory.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace hart::cli {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

status_or<std::vector<int32_t>> build_prompt(const generate_options& o, const tokenizer& tok) {
  if (o.raw) {
    if (o.prompt.empty()) return invalid_argument("--raw needs a non-empty --prompt");
    HART_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.encode(o.prompt));
    if (tok.config().add_bos_token && tok.config().bos_id) ids.insert(ids.begin(), *tok.config().bos_id);
    return ids;
  }
  std::vector<chat_message> msgs;
  if (!o.messages_file.empty()) {
    std::ifstream in(o.messages_file);
    if (!in) return not_found("cannot open messages file '%s'", o.messages_file.c_str());
    std::stringstream ss;
    ss << in.rdbuf();
    HART_ASSIGN_OR_RETURN(msgs, chat_messages_from_json(ss.str()));
  }
  if (!o.system.empty()) msgs.insert(msgs.begin(), {"system", o.system});
  if (!o.prompt.empty()) msgs.push_back({"user", o.prompt});
  if (msgs.empty()) return invalid_argument("nothing to generate from: give --prompt or --messages");
  chat_options co;
  co.thinking = o.thinking == "think"      ? thinking_mode::think
                : o.thinking == "no_think" ? thinking_mode::no_think
                                           : thinking_mode::none;
  HART_ASSIGN_OR_RETURN(std::string text, chat_encode(msgs, co));
  return tok.encode(text);
}

}  // namespace

CLI::App* add_generate_command(CLI::App& app, generate_options* o) {
  CLI::App* cmd =
      app.add_subcommand("generate", "Generate text from a prompt or chat messages, streamed to stdout");
  add_common(cmd, &o->common);
  add_load_format(cmd, &o->common);
  cmd->add_option("--device", o->common.device, "Run the model on: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (sent as one user message unless --raw)");
  cmd->add_option("--messages", o->messages_file,
                  "JSON file with chat messages [{\"role\":..,\"content\":..}]")
      ->check(CLI::ExistingFile);
  cmd->add_option("--system", o->system, "System prompt placed before the user message");
  cmd->add_flag("--raw", o->raw, "Feed --prompt verbatim (BOS + text), without the chat template");
  cmd->add_option("--thinking", o->thinking, "Chat thinking mode: none, think (<think>), no_think (</think>)")
      ->check(CLI::IsMember({"none", "think", "no_think"}))
      ->capture_default_str();
  cmd->add_option("-n,--max-new-tokens", o->max_new_tokens, "Tokens to generate at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past the end-of-sequence token");
  cmd->add_option("--temperature", o->sampling.temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Sample among the k most likely tokens (0 = off)")
      ->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "Nucleus sampling mass (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", o->sampling.min_p, "Drop tokens below min_p * p_max (0 = off)")
      ->capture_default_str();
  cmd->add_option("--seed", o->sampling.seed, "Sampling seed")->capture_default_str();
  return cmd;
}

int run_generate(const generate_options& o) {
  if (status s = o.sampling.validate(); !s.ok()) return fail(s);
  auto eng = worker::load_forward_engine(o.common);
  if (!eng.ok()) return fail(eng.get_status());
  auto tok = load_tokenizer(o.common.model_dir);
  if (!tok.ok()) return fail(tok.get_status());
  auto prompt = build_prompt(o, *tok);
  if (!prompt.ok()) return fail(prompt.get_status());

  const forward_engine& e = **eng;
  // Ids past the tokenizer's table (padding rows of the head) are never sampled.
  const int64_t V = std::min<int64_t>(e.config().vocab_size, tok->vocab_size());
  const int32_t eos = tok->config().eos_id.value_or(e.config().eos_token_id);
  sequence_state seq = e.new_sequence();
  sampler smp(o.sampling);
  stream_decoder out(*tok, /*skip_special=*/true);

  auto t0 = clock_type::now();
  std::vector<float> logits;
  if (status s = e.forward({{&seq, *prompt, logits_request::last}}, &logits); !s.ok()) return fail(s);
  const double prefill_s = seconds_since(t0);

  auto t1 = clock_type::now();
  int64_t n_gen = 0;
  const char* finish = "length";
  while (n_gen < o.max_new_tokens) {
    const int32_t next = smp.sample(logits.data(), V);
    ++n_gen;
    if (next == eos && !o.ignore_eos) {
      finish = "stop";
      break;
    }
    auto text = out.push(next);
    if (!text.ok()) return fail(text.get_status());
    std::fputs(text->c_str(), stdout);
    std::fflush(stdout);
    if (n_gen == o.max_new_tokens) break;
    if (status s = e.forward({{&seq, {next}, logits_request::last}}, &logits); !s.ok()) return fail(s);
  }
  std::fputs(out.flush().c_str(), stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  const double decode_s = seconds_since(t1);
  std::fprintf(stderr,
               "hart: prompt %zu tokens, prefill %.3f s (%.1f tok/s); generated %lld tokens in %.3f s "
               "(%.1f tok/s); finish: %s\n",
               prompt->size(), prefill_s, prompt->size() / std::max(prefill_s, 1e-9), (long long)n_gen,
               decode_s, n_gen / std::max(decode_s, 1e-9), finish);
  return 0;
}

}  // namespace hart::cli
