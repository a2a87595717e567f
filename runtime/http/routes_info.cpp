// GET /health, /health_generate, /v1/models, /get_weight_version, /model_info, /server_info,
// /v1/loads, /metrics and the control verbs (/abort_request, /pause_generation, /continue_generation,
// /flush_cache): each a control verb or a short generation through the gateway.
#include "runtime/http/api_error.h"
#include "runtime/http/control_api.h"
#include "runtime/http/http_server_impl.h"
#include "runtime/http/prometheus.h"

#include <ctime>

namespace hart::http {
namespace {

using httplib::ContentReader;
using httplib::Request;
using httplib::Response;

// SGLang's own health_generate waits 20 s.
constexpr std::chrono::seconds k_health_generate_timeout{20};

int64_t unix_now() {
  return int64_t(std::time(nullptr));
}

protocol::control_request verb(protocol::control_verb v) {
  protocol::control_request c;
  c.verb = v;
  return c;
}

// Answers a control verb's ack as {"success": true, "message": ...}.
void ack(http_server::impl& s, Response& res, protocol::control_request c, const char* message) {
  status_or<protocol::reply> r = s.control(c);
  if (!r.ok()) return http_server::impl::reply_error(res, r.get_status());
  http_server::impl::reply_json(res, 200, {{"success", true}, {"message", message}});
}

// One greedy token from the smallest prompt there is: the whole path (gateway, scheduler,
// worker) answers within k_health_generate_timeout, or it is unhealthy (503).
void health_generate(http_server::impl& s, Response& res) {
  protocol::generate_request g;
  g.kind = protocol::prompt_kind::token_ids;
  const int32_t bos = s.params.tok && s.params.tok->config().bos_id ? *s.params.tok->config().bos_id : 0;
  g.token_ids = {uint32_t(bos)};
  g.sampling.temperature = 0.0f;
  g.sampling.max_new_tokens = 1;
  g.sampling.ignore_eos = true;
  auto ex = s.new_exchange();
  generation gen(g.sampling, s.params.eos_token_id);
  ex->submit(g);
  const auto deadline = std::chrono::steady_clock::now() + k_health_generate_timeout;
  while (!gen.done() && !s.stopping && std::chrono::steady_clock::now() < deadline) {
    if (std::optional<protocol::reply> r = ex->next(k_poll)) gen.apply(*r);
  }
  if (!gen.done()) {
    ex->abort("health_generate timed out");
    return http_server::impl::reply_error(
        res, unavailable("health_generate: no token within %lld s (paused or overloaded?)",
                         (long long)k_health_generate_timeout.count()));
  }
  if (!gen.error().ok())
    return http_server::impl::reply_error(
        res, unavailable("health_generate: %s", gen.error().to_string().c_str()));
  if (gen.sample(0).final.reason == protocol::finish_reason::error)
    return http_server::impl::reply_error(
        res, unavailable("health_generate: %s", gen.sample(0).final.error_message.c_str()));
  res.status = 200;
}

}  // namespace

void add_info_routes(http_server::impl& s) {
  httplib::Server& srv = s.srv;
  srv.Get("/health", [&s](const Request&, Response& res) {
    status_or<protocol::reply> r = s.control(verb(protocol::control_verb::health));
    if (!r.ok()) return http_server::impl::reply_error(res, r.get_status());
    res.status = 200;
  });
  srv.Get("/health_generate", [&s](const Request&, Response& res) { health_generate(s, res); });
  srv.Get("/v1/models", [&s](const Request&, Response& res) {
    http_server::impl::reply_json(res, 200,
                                  models_json(s.params.model_name, unix_now(), s.params.max_context));
  });
  srv.Get("/get_weight_version", [&s](const Request&, Response& res) {
    status_or<uint64_t> v = s.weight_version();
    if (!v.ok()) return http_server::impl::reply_error(res, v.get_status());
    http_server::impl::reply_json(res, 200, weight_version_json(*v));
  });
  // The tokenizer stays the start-up model's: a disk update swaps weights only.
  for (const char* path : {"/model_info", "/get_model_info"}) {
    srv.Get(path, [&s](const Request&, Response& res) {
      status_or<uint64_t> v = s.weight_version();
      if (!v.ok()) return http_server::impl::reply_error(res, v.get_status());
      http_server::impl::reply_json(res, 200, model_info_json(s.model_path_of(*v), s.params.model_path, *v));
    });
  }
  for (const char* path : {"/server_info", "/get_server_info"}) {
    srv.Get(path, [&s](const Request&, Response& res) {
      status_or<protocol::stats_reply> st = s.stats();
      if (!st.ok()) return http_server::impl::reply_error(res, st.get_status());
      const uint64_t v = uint64_t(stats_value(*st, "weight_version"));
      http_server::impl::reply_json(res, 200,
                                    server_info_json(s.params.server_args, s.model_path_of(v), *st, v));
    });
  }
  srv.Get("/v1/loads", [&s](const Request&, Response& res) {
    status_or<protocol::stats_reply> st = s.stats();
    if (!st.ok()) return http_server::impl::reply_error(res, st.get_status());
    http_server::impl::reply_json(res, 200, loads_json(*st, unix_now()));
  });
  srv.Get("/metrics", [&s](const Request&, Response& res) {
    status_or<protocol::stats_reply> st = s.stats();
    if (!st.ok()) return http_server::impl::reply_error(res, st.get_status());
    res.status = 200;
    res.set_content(prometheus_text(*st), k_prometheus_content_type);
  });

  srv.Post("/abort_request", [&s](const Request& req, Response& res, const ContentReader& reader) {
    json body;
    if (!s.read_json(req, reader, res, &body)) return;
    status_or<abort_body> a = parse_abort_body(body);
    if (!a.ok()) return http_server::impl::reply_error(res, a.get_status(), true);
    // SGLang answers 200 for a rid that already ended (or never ran): abort is idempotent.
    const std::string why = a->message.empty() ? "aborted by abort_request" : a->message;
    const size_t aborted = a->all ? s.abort_all(why) : s.abort_rid(a->rid, why);
    http_server::impl::reply_json(res, 200, {{"success", true}, {"aborted", aborted}});
  });
  srv.Post("/pause_generation", [&s](const Request& req, Response& res, const ContentReader& reader) {
    json body;
    if (!s.read_json(req, reader, res, &body)) return;
    status_or<protocol::pause_mode> m = parse_pause_body(body);
    if (!m.ok()) return http_server::impl::reply_error(res, m.get_status(), true);
    protocol::control_request c = verb(protocol::control_verb::pause);
    c.mode = *m;
    // Named before the scheduler aborts them: their finals may come before the pause's ack.
    if (c.mode == protocol::pause_mode::abort) s.name_aborts("aborted by pause_generation");
    ack(s, res, c, "generation paused");
  });
  srv.Post("/continue_generation", [&s](const Request& req, Response& res, const ContentReader& reader) {
    json body;
    if (!s.read_json(req, reader, res, &body)) return;
    ack(s, res, verb(protocol::control_verb::resume), "generation continues");
  });
  // slime and verl GET it; Miles POSTs {}.
  srv.Get("/flush_cache", [&s](const Request&, Response& res) {
    ack(s, res, verb(protocol::control_verb::flush_cache), "cache flushed");
  });
  srv.Post("/flush_cache", [&s](const Request& req, Response& res, const ContentReader& reader) {
    json body;
    if (!s.read_json(req, reader, res, &body)) return;
    ack(s, res, verb(protocol::control_verb::flush_cache), "cache flushed");
  });
}

}  // namespace hart::http
