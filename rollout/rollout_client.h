// File: rollout/rollout_client.h
// Batched rollouts against a running `hart serve` (docs/protocol.md), for RL
// trainers: submit prompts as token ids with `n` samples each, and get back
// per sample the sampled tokens, the log-prob of each under the distribution
// it was sampled from, the weight version that produced each token, and the
// finish reason; aborted samples keep the tokens they had. Many requests are
// in flight at once over one DEALER connection; replies are routed by request
// id. No LibTorch here. One client is used by one thread at a time.
//
//   auto rc = rollout_client::connect({"tcp://127.0.0.1:5557"});
//   rollout_prompt p;
//   p.token_ids = {0, 17, 42};
//   p.sampling.n = 8;
//   p.sampling.max_new_tokens = 16;
//   status_or<rollout_result> r = rc.value()->generate({p});
//   r->groups[0].samples[3].logprobs;   // one per token
//
// With rollout_prompt::return_routing each sample also carries the routed
// experts and indexer top-k of every position the model computed
// (protocol::routing_info), for replaying them in the trainer's forward.
#pragma once

#include "runtime/core/status.h"
#include "runtime/protocol/messages.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hart {

struct rollout_client_params {
  std::string endpoint = "tcp://127.0.0.1:5557";
  std::string curve_server_key{};  ///< the server's Z85 public key; enables CURVE
  std::string curve_secret_key{};  ///< this client's Z85 secret key (a server with an allowlist); a fresh
                                   ///< pair when empty
  /// Longest wait for one batch to complete (wait / generate) or one control reply.
  std::chrono::milliseconds timeout{600000};
  /// Requests (prompts) outstanding on the server at once; more wait in the client.
  uint32_t max_in_flight = 256;

  status validate() const;
};

/// One prompt: token ids (no chat template) and its sampling options. Log-probs
/// are always requested; `sampling.n` samples share the prompt.
struct rollout_prompt {
  std::vector<uint32_t> token_ids;
  protocol::sampling_options sampling;
  bool return_routing = false;  ///< fill rollout_sample::routing (the prompt is not taken from the cache)
  bool return_indexer_picks = false;  ///< with return_routing: the indexer picks too
};

struct rollout_sample {
  std::vector<uint32_t> token_ids;
  std::vector<float> logprobs;            ///< one per token, natural log, of the sampled distribution
  std::vector<uint64_t> weight_versions;  ///< one per token: the weights that produced it
  protocol::finish_reason finish = protocol::finish_reason::stop;
  std::string error_message;   ///< when finish == error
  uint32_t cached_tokens = 0;  ///< prompt tokens served from the prefix cache
  /// return_routing: prompt and tokens but the last; positions = prompt + tokens - 1.
  protocol::routing_info routing;
};

/// The samples of one prompt, by sample index.
struct rollout_group {
  std::vector<rollout_sample> samples;
};

struct rollout_result {
  std::vector<rollout_group> groups;  ///< by prompt index in the submitted batch
  int64_t n_tokens = 0;               ///< sampled tokens over all samples
  double wall_s = 0;                  ///< submit -> last final
};

/// How far a submitted batch has come (poll() updates it).
struct rollout_progress {
  int64_t n_tokens = 0;        ///< tokens received so far
  int64_t n_samples_done = 0;  ///< samples that got their final
  int64_t n_samples = 0;       ///< samples in the batch
  uint64_t last_version = 0;   ///< weight version of the latest chunk
};

class rollout_client {
 public:
  static status_or<std::unique_ptr<rollout_client>> connect(const rollout_client_params& params);
  ~rollout_client();
  rollout_client(const rollout_client&) = delete;
  rollout_client& operator=(const rollout_client&) = delete;

  /// Queues a batch and sends as many of its requests as max_in_flight allows.
  /// invalid_argument (naming the prompt) for an empty batch or a prompt the
  /// server would refuse on its face (empty, n = 0, bad sampling values);
  /// nothing of the batch is sent then. Returns the batch id.
  status_or<uint64_t> submit(const std::vector<rollout_prompt>& prompts);

  /// Handles the replies that arrive within `timeout` (at least the ones
  /// already there) and sends queued requests as others finish.
  status poll(std::chrono::milliseconds timeout);

  /// Progress of a submitted batch not yet handed out by wait(); not_found otherwise.
  status_or<rollout_progress> progress(uint64_t batch) const;

  /// Aborts the batch's requests: running samples end with finish `abort` and
  /// keep their tokens; queued ones end at once with no tokens.
  status abort(uint64_t batch);

  /// Polls until every sample of `batch` has its final, then hands the result
  /// out (the batch is forgotten). The server's error when it refused a
  /// request of the batch (e.g. out_of_range for a token id outside the
  /// vocabulary; the rest of the batch is drained first); data_loss on a chunk
  /// sequence gap; unavailable after `timeout` without completion.
  status_or<rollout_result> wait(uint64_t batch);

  /// submit + wait.
  status_or<rollout_result> generate(const std::vector<rollout_prompt>& prompts);

  // -- control verbs (docs/protocol.md §4.2); replies to generations that arrive meanwhile are kept --
  status pause(protocol::pause_mode mode);
  status resume();
  status flush_cache();
  status_or<uint64_t> weight_version();

  struct impl;

 private:
  explicit rollout_client(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace hart
