// POST /update_weights_from_disk and /update_weight_version: weight updates run by the
// weight-sync actor (the same one-at-a-time, step-boundary swap a trainer's push gets), answered
// when the new version serves. Failures carry SGLang's {success: false, message} beside the
// error object, since RL clients read `success`.
#include "runtime/http/api_error.h"
#include "runtime/http/control_api.h"
#include "runtime/http/http_server_impl.h"

#include <future>

namespace hart::http {
namespace {

using httplib::ContentReader;
using httplib::Request;
using httplib::Response;

void reply_failure(Response& res, const status& s, bool from_parser = false) {
  json body = error_body(s, from_parser);
  body["success"] = false;
  body["message"] = s.message();
  http_server::impl::reply_json(res, http_status_of(s.code()), body);
}

// Runs `u` through the weight-sync actor and waits for its outcome (a checkpoint's build takes
// seconds; the wait ends early only when the server stops).
status_or<uint64_t> run_update(http_server::impl& s, const weights_update& u) {
  if (!s.weights)
    return unimplemented("weight updates need the engine in the server process (not --worker-process)");
  auto outcome = std::make_shared<std::promise<std::pair<status, uint64_t>>>();
  std::future<std::pair<status, uint64_t>> done = outcome->get_future();
  s.weights(u, [outcome](status st, uint64_t serving) { outcome->set_value({std::move(st), serving}); });
  while (done.wait_for(k_poll) != std::future_status::ready) {
    if (s.stopping) return unavailable("the server is shutting down");
  }
  auto [st, serving] = done.get();
  HART_RETURN_IF_ERROR(st);
  return serving;
}

}  // namespace

void add_weights_routes(http_server::impl& s) {
  s.srv.Post("/update_weights_from_disk",
             [&s](const Request& req, Response& res, const ContentReader& reader) {
               json body;
               if (!s.read_json(req, reader, res, &body)) return;
               status_or<disk_update_body> d = parse_disk_update_body(body);
               if (!d.ok()) return reply_failure(res, d.get_status(), true);
               const size_t aborted =
                   d->abort_all ? s.abort_all("aborted by update_weights_from_disk (abort_all_requests)") : 0;
               std::lock_guard<std::mutex> one_at_a_time(s.weights_update_m);
               status_or<uint64_t> serving = s.weight_version();
               if (!serving.ok()) return reply_failure(res, serving.get_status());
               s.disk_update_started(d->model_path, *serving);
               status_or<uint64_t> v = run_update(s, weights_update{d->model_path, d->version});
               s.disk_update_ended(v.ok());
               if (!v.ok()) return reply_failure(res, v.get_status());
               http_server::impl::reply_json(
                   res, 200,
                   {{"success", true},
                    {"message", "weights from " + d->model_path + " serve as version " + std::to_string(*v)},
                    {"weight_version", std::to_string(*v)},
                    {"num_paused_requests", 0},
                    {"num_aborted_requests", aborted}});
             });
  s.srv.Post("/update_weight_version", [&s](const Request& req, Response& res, const ContentReader& reader) {
    json body;
    if (!s.read_json(req, reader, res, &body)) return;
    status_or<version_update_body> b = parse_version_update_body(body);
    if (!b.ok()) return reply_failure(res, b.get_status(), true);
    const size_t aborted =
        b->abort_all ? s.abort_all("aborted by update_weight_version (abort_all_requests)") : 0;
    std::lock_guard<std::mutex> one_at_a_time(s.weights_update_m);
    status_or<uint64_t> v = run_update(s, weights_update{"", b->version});
    if (!v.ok()) return reply_failure(res, v.get_status());
    http_server::impl::reply_json(res, 200,
                                  {{"success", true},
                                   {"message", "the serving weights are version " + std::to_string(*v)},
                                   {"weight_version", std::to_string(*v)},
                                   {"num_aborted_requests", aborted}});
  });
}

}  // namespace hart::http
