// `hart score`: teacher-forced logits [B,S,V] and per-token log-probs [B,S]
// for input_ids [B,S], computed whole, in prefill chunks, or by decoding one
// token per step from a position on (all rows batched in every call).
#include "cli/cli_common.h"
#include "runtime/model/safetensors.h"
#include "runtime/worker/engine_factory.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>

namespace hart::cli {
namespace {

status_or<std::vector<std::vector<int32_t>>> read_input_ids(const std::string& path, int64_t vocab) {
  HART_ASSIGN_OR_RETURN(weight_store in, weight_store::open(path));
  const tensor_entry* e = in.find("input_ids");
  if (!e) return not_found("%s has no tensor 'input_ids'", path.c_str());
  if (e->shape.size() != 2 || e->shape[0] <= 0 || e->shape[1] <= 0) {
    return invalid_argument("%s: input_ids must be [B, S] with B, S > 0, got %s", path.c_str(),
                            e->shape_string().c_str());
  }
  if (e->type != dtype::i64 && e->type != dtype::i32) {
    return invalid_argument("%s: input_ids must be I64 or I32, got %s", path.c_str(),
                            std::string(dtype_name(e->type)).c_str());
  }
  const int64_t B = e->shape[0], S = e->shape[1];
  std::vector<std::vector<int32_t>> ids(B, std::vector<int32_t>(S));
  for (int64_t i = 0; i < B * S; ++i) {
    int64_t v;
    if (e->type == dtype::i64) {
      std::memcpy(&v, e->data + i * 8, 8);
    } else {
      int32_t w;
      std::memcpy(&w, e->data + i * 4, 4);
      v = w;
    }
    if (v < 0 || v >= vocab) {
      return out_of_range("%s: input_ids[%lld][%lld] = %lld is outside the vocabulary [0, %lld)",
                          path.c_str(), (long long)(i / S), (long long)(i % S), (long long)v,
                          (long long)vocab);
    }
    ids[i / S][i % S] = int32_t(v);
  }
  return ids;
}

}  // namespace

CLI::App* add_score_command(CLI::App& app, score_options* o) {
  CLI::App* cmd = app.add_subcommand(
      "score", "Teacher-forced logits and per-token log-probs for input_ids [B,S] from a safetensors file");
  add_common(cmd, &o->common);
  cmd->add_option("--device", o->common.device, "Run the model on: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("-i,--input", o->input, "safetensors file with input_ids [B,S] (I64 or I32)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--out", o->output, "Output safetensors: logits [B,S,V] F32, logprobs [B,S] F32")
      ->required();
  cmd->add_option("--prefill-chunk", o->prefill_chunk, "Feed the prompt in chunks of N tokens (0 = whole)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--decode-from", o->decode_from,
                  "Prefill positions [0,P), then decode one token per step from P (batched across rows)")
      ->check(CLI::NonNegativeNumber);
  return cmd;
}

int run_score(const score_options& o) {
  auto eng = worker::load_forward_engine(o.common);
  if (!eng.ok()) return fail(eng.get_status());
  const forward_engine& e = **eng;
  const int64_t V = e.config().vocab_size;
  auto ids_or = read_input_ids(o.input, V);
  if (!ids_or.ok()) return fail(ids_or.get_status());
  const auto& ids = *ids_or;
  const int64_t B = int64_t(ids.size()), S = int64_t(ids[0].size());
  const int64_t decode_from = o.decode_from < 0 ? S : o.decode_from;
  if (decode_from > S)
    return fail(invalid_argument("--decode-from %lld is past the sequence length %lld",
                                 (long long)decode_from, (long long)S));
  const int64_t chunk = o.prefill_chunk > 0 ? o.prefill_chunk : std::max<int64_t>(decode_from, 1);

  std::vector<sequence_state> seqs(B);
  for (auto& s : seqs) {
    s = e.new_sequence();
    s.tie_reference_length = S;  // ties resolved as the reference's one full forward does
  }
  std::vector<float> logits(B * S * V);
  // One forward call over all rows for positions [at, at + n).
  auto step = [&](int64_t at, int64_t n) -> status {
    std::vector<batch_item> batch;
    for (int64_t b = 0; b < B; ++b) {
      batch.push_back({&seqs[b], {ids[b].begin() + at, ids[b].begin() + at + n}, logits_request::all});
    }
    std::vector<float> out;
    HART_RETURN_IF_ERROR(e.forward(batch, &out));
    for (int64_t b = 0; b < B; ++b) {
      std::memcpy(logits.data() + (b * S + at) * V, out.data() + b * n * V, n * V * sizeof(float));
    }
    return {};
  };
  for (int64_t at = 0; at < decode_from; at += chunk) {
    if (status s = step(at, std::min(chunk, decode_from - at)); !s.ok()) return fail(s);
  }
  for (int64_t at = decode_from; at < S; ++at) {
    if (status s = step(at, 1); !s.ok()) return fail(s);
  }

  // logprobs[b][s] = log softmax(logits[b][s-1])[ids[b][s]]; position 0 has no prediction (0).
  std::vector<float> logprobs(B * S, 0.0f);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 1; s < S; ++s) {
      logprobs[b * S + s] = model_logprob(logits.data() + (b * S + s - 1) * V, V, ids[b][s]);
    }
  }
  std::vector<int64_t> ids64(B * S);
  for (int64_t i = 0; i < B * S; ++i) ids64[i] = ids[i / S][i % S];
  status w =
      safetensors_write(o.output,
                        {{"logits", dtype::f32, {B, S, V}, logits.data(), logits.size() * sizeof(float)},
                         {"logprobs", dtype::f32, {B, S}, logprobs.data(), logprobs.size() * sizeof(float)},
                         {"input_ids", dtype::i64, {B, S}, ids64.data(), ids64.size() * sizeof(int64_t)}},
                        {{"producer", "hart score"}, {"precision", o.common.precision_name}});
  if (!w.ok()) return fail(w);
  std::fprintf(stderr, "hart: scored %lld x %lld tokens -> %s\n", (long long)B, (long long)S,
               o.output.c_str());
  return 0;
}

}  // namespace hart::cli
