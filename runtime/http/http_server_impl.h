// File: runtime/http/http_server_impl.h
// Internal to runtime/http (style R3): the server's state and the helpers its route files
// (routes_info.cpp, routes_openai.cpp, routes_sglang.cpp) share. Includes cpp-httplib, which
// nothing outside runtime/http sees.
#pragma once

#include "runtime/http/exchange.h"
#include "runtime/http/generation.h"
#include "runtime/http/http_server.h"
#include "runtime/http/json_fields.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hart::http {

/// How long an HTTP thread waits on its queue before it looks at the socket and the stop flag.
constexpr std::chrono::milliseconds k_poll{50};
/// A control verb's answer comes within this (the scheduler answers between steps).
constexpr std::chrono::milliseconds k_control_timeout{30000};

/// Formats what one reply, just applied to the generation, shows on a stream ("" = nothing).
using stream_fn = std::function<std::string(const generation&, int sample, const protocol::reply&)>;
/// The last events of a stream, after every sample's final.
using stream_end_fn = std::function<std::string(const generation&)>;

struct http_server::impl {
  http_params params;
  submit_fn submit;
  weights_fn weights;  ///< null: the weight endpoints answer 501
  httplib::Server srv;
  std::thread thread;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> serial{0};
  /// Running generations by SGLang rid (a generated one when the client gave none), for
  /// /abort_request; weak: an ended exchange leaves by itself.
  std::mutex live_m;
  std::map<std::string, std::weak_ptr<exchange>> live;

  // -- exchanges ---------------------------------------------------------------
  std::shared_ptr<exchange> new_exchange();
  /// A control verb through a fresh exchange; the answer or the error.
  status_or<protocol::reply> control(protocol::control_request c);
  /// The running HTTP generations named `rid` (all of them: null).
  std::vector<std::shared_ptr<exchange>> live_matching(const std::string* rid);
  /// Aborts them, `why` their finish message; how many there were.
  size_t abort_all(const std::string& why);
  size_t abort_rid(const std::string& rid, const std::string& why);
  /// Names `why` as the reason of the abort every running HTTP generation is about to get
  /// from elsewhere (a pause in abort mode).
  void name_aborts(const std::string& why);
  /// The scheduler's stats (the `stats` verb).
  status_or<protocol::stats_reply> stats();
  /// The serving weight version (the `weight_version` verb).
  status_or<uint64_t> weight_version();

  // -- the checkpoint serving ----------------------------------------------------
  /// The directory the weights of `version` (the serving one, from weight_version() or the
  /// stats) were loaded from: the start-up model until /update_weights_from_disk swaps another
  /// in (SGLang's model_path after an update). A disk update swaps at a step boundary before
  /// its answer comes, so while one runs a version past the one it started over is its.
  std::string model_path_of(uint64_t version);
  /// A disk update of `dir` starts while `serving` serves; it ended (`ok`: `dir` serves now).
  void disk_update_started(const std::string& dir, uint64_t serving);
  void disk_update_ended(bool ok);
  /// Held through an HTTP weight update, so nothing else from here swaps while a disk update
  /// loads (the weight-sync actor runs them in order anyway).
  std::mutex weights_update_m;
  std::mutex model_path_m;
  std::string model_path;     ///< guarded by model_path_m; params.model_path at start
  std::string loading_path;   ///< guarded by model_path_m: a disk update's directory while it runs
  uint64_t loading_over = 0;  ///< guarded by model_path_m: the version serving when it started
  /// A generation /abort_request reaches by name while this lives (a handler's scope, or a
  /// stream's end).
  class tracked {
   public:
    tracked(impl& s, std::string rid, std::weak_ptr<exchange> ex)
        : s_(s), rid_(std::move(rid)), ex_(std::move(ex)) {}
    ~tracked();
    tracked(const tracked&) = delete;
    tracked& operator=(const tracked&) = delete;
    const std::string& rid() const { return rid_; }

   private:
    impl& s_;
    std::string rid_;
    std::weak_ptr<exchange> ex_;
  };
  /// Names `ex` by `rid` (a generated name when empty; a rid used twice names the later).
  std::shared_ptr<tracked> track(const std::string& rid, const std::shared_ptr<exchange>& ex);

  /// Submits `g` and waits for the first chunk or final, so a request refused before any output
  /// gets an HTTP error instead of a stream (pending: replies taken and not yet applied, routing
  /// parts before it among them). False: the request failed or the server stops; `res` holds
  /// the error then.
  bool start(exchange& ex, const protocol::generate_request& g, generation& gen,
             std::vector<protocol::reply>* pending, httplib::Response& res);
  /// Waits for the whole generation (a client that leaves is not noticed: docs/http.md). False
  /// with `res` answered when it failed.
  bool finish(exchange& ex, generation& gen, std::vector<protocol::reply> pending, httplib::Response& res);
  /// Streams the generation as server-sent events; a client that leaves (or reads so slowly
  /// that its queue overflows) gets its generation aborted. `keep` lives until the stream ends.
  void stream(httplib::Response& res, std::shared_ptr<exchange> ex, std::shared_ptr<generation> gen,
              std::vector<protocol::reply> pending, stream_fn on_reply, stream_end_fn on_end,
              std::shared_ptr<void> keep);

  // -- answers -----------------------------------------------------------------
  static void reply_json(httplib::Response& res, int status, const json& body);
  /// `from_parser`: a request parser's error, naming the field (error_body's param).
  static void reply_error(httplib::Response& res, const status& s, bool from_parser = false);
  /// The body of a POST, at most params.max_body_bytes (413 otherwise), as a JSON object (an
  /// empty body, or none, reads as {}). False with `res` answered when it is not.
  bool read_json(const httplib::Request& req, const httplib::ContentReader& reader, httplib::Response& res,
                 json* out);
};

void add_info_routes(
    http_server::impl& s);  // health, models, model info, weight version, loads, metrics, control
void add_openai_routes(http_server::impl& s);   // /v1/chat/completions, /v1/completions
void add_sglang_routes(http_server::impl& s);   // /generate
void add_weights_routes(http_server::impl& s);  // /update_weights_from_disk, /update_weight_version

}  // namespace hart::http
