#include "runtime/http/http_server.h"

#include "runtime/core/log.h"
#include "runtime/http/api_error.h"
#include "runtime/http/http_server_impl.h"
#include "runtime/http/openai_api.h"

#include <arpa/inet.h>

namespace hart::http {

// -- params ---------------------------------------------------------------------

status split_host_port(const std::string& text, std::string* host, int* port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return invalid_argument("http bind '%s': expected host:port", text.c_str());
  std::string h = text.substr(0, colon);
  if (h.front() == '[') {
    if (h.back() != ']') return invalid_argument("http bind '%s': expected [v6-address]:port", text.c_str());
    h = h.substr(1, h.size() - 2);
  }
  const std::string p = text.substr(colon + 1);
  if (p.find_first_not_of("0123456789") != std::string::npos || p.size() > 5 || std::stoi(p) > 65535)
    return invalid_argument("http bind '%s': port '%s' is not in [0, 65535]", text.c_str(), p.c_str());
  *host = h;
  *port = std::stoi(p);
  return {};
}

bool host_is_loopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

status http_params::validate() const {
  std::string host;
  int port = 0;
  HART_RETURN_IF_ERROR(split_host_port(bind, &host, &port));
  if (!host_is_loopback(host) && api_key.empty())
    return invalid_argument("http bind '%s': not a loopback address; serving it needs an API key (--api-key)",
                            bind.c_str());
  if (max_body_bytes < 1024)
    return invalid_argument("http max body: %zu bytes, must be >= 1024", max_body_bytes);
  if (threads < 1 || threads > 4096)
    return invalid_argument("http threads: %d, must be in [1, 4096]", threads);
  if (model_name.empty()) return invalid_argument("http: a served model name is required");
  return {};
}

// -- exchanges --------------------------------------------------------------------

std::shared_ptr<exchange> http_server::impl::new_exchange() {
  return std::make_shared<exchange>(submit, std::string(1, '\0') + "http-" + std::to_string(++serial));
}

status_or<protocol::reply> http_server::impl::control(protocol::control_request c) {
  HART_ASSIGN_OR_RETURN(protocol::reply r, new_exchange()->control(c, k_control_timeout));
  if (const auto* e = std::get_if<protocol::error_reply>(&r)) return status(e->code, e->message);
  return r;
}

status_or<protocol::stats_reply> http_server::impl::stats() {
  protocol::control_request c;
  c.verb = protocol::control_verb::stats;
  HART_ASSIGN_OR_RETURN(protocol::reply r, control(c));
  if (auto* s = std::get_if<protocol::stats_reply>(&r)) return std::move(*s);
  return internal_error("stats: unexpected answer");
}

status_or<uint64_t> http_server::impl::weight_version() {
  protocol::control_request c;
  c.verb = protocol::control_verb::weight_version;
  HART_ASSIGN_OR_RETURN(protocol::reply r, control(c));
  if (const auto* w = std::get_if<protocol::weight_version_reply>(&r)) return w->version;
  return internal_error("weight version: unexpected answer");
}

std::vector<std::shared_ptr<exchange>> http_server::impl::live_matching(const std::string* rid) {
  std::vector<std::shared_ptr<exchange>> out;
  std::lock_guard<std::mutex> lock(live_m);
  for (auto it = live.begin(); it != live.end();) {
    std::shared_ptr<exchange> ex = it->second.lock();
    if (!ex) {
      it = live.erase(it);
      continue;
    }
    if (!rid || it->first == *rid) out.push_back(std::move(ex));
    ++it;
  }
  return out;
}

size_t http_server::impl::abort_all(const std::string& why) {
  const std::vector<std::shared_ptr<exchange>> targets = live_matching(nullptr);
  for (const auto& ex : targets) ex->abort(why);
  return targets.size();
}

size_t http_server::impl::abort_rid(const std::string& rid, const std::string& why) {
  const std::vector<std::shared_ptr<exchange>> targets = live_matching(&rid);
  for (const auto& ex : targets) ex->abort(why);
  return targets.size();
}

void http_server::impl::name_aborts(const std::string& why) {
  for (const auto& ex : live_matching(nullptr)) ex->name_abort(why);
}

std::string http_server::impl::model_path_of(uint64_t version) {
  std::lock_guard<std::mutex> lock(model_path_m);
  return !loading_path.empty() && version > loading_over ? loading_path : model_path;
}

void http_server::impl::disk_update_started(const std::string& dir, uint64_t serving) {
  std::lock_guard<std::mutex> lock(model_path_m);
  loading_path = dir;
  loading_over = serving;
}

void http_server::impl::disk_update_ended(bool ok) {
  std::lock_guard<std::mutex> lock(model_path_m);
  if (ok) model_path = loading_path;
  loading_path.clear();
}

std::shared_ptr<http_server::impl::tracked> http_server::impl::track(const std::string& rid,
                                                                     const std::shared_ptr<exchange>& ex) {
  // The exchange's serial names it: unique for the server's life.
  std::string name = rid.empty() ? "hart-" + ex->client().substr(ex->client().rfind('-') + 1) : rid;
  {
    std::lock_guard<std::mutex> lock(live_m);
    live[name] = ex;
  }
  return std::make_shared<tracked>(*this, std::move(name), ex);
}

http_server::impl::tracked::~tracked() {
  std::lock_guard<std::mutex> lock(s_.live_m);
  auto it = s_.live.find(rid_);
  // Only our own entry: a later generation may have taken the name.
  if (it != s_.live.end() && !it->second.owner_before(ex_) && !ex_.owner_before(it->second))
    s_.live.erase(it);
}

bool http_server::impl::start(exchange& ex, const protocol::generate_request& g, generation& gen,
                              std::vector<protocol::reply>* pending, httplib::Response& res) {
  ex.submit(g);
  for (;;) {
    if (stopping) {
      ex.abort("the server is shutting down");
      reply_error(res, unavailable("the server is shutting down"));
      return false;
    }
    std::optional<protocol::reply> r = ex.next(k_poll);
    if (!r) continue;
    if (const auto* e = std::get_if<protocol::error_reply>(&*r); e && e->tag == 0) {
      reply_error(res, status(e->code, e->message));
      return false;
    }
    if (const auto* f = std::get_if<protocol::final_event>(&*r);
        f && f->reason == protocol::finish_reason::error) {
      ex.abort("another sample of the request failed");  // they failed alike (submitted together)
      reply_error(res, status_from_text(f->error_message));
      return false;
    }
    if (std::holds_alternative<protocol::routing_part>(*r)) {
      pending->push_back(std::move(*r));  // a sample ended before its first token: its final follows
    } else if (std::holds_alternative<protocol::chunk_event>(*r) ||
               std::holds_alternative<protocol::final_event>(*r)) {
      pending->push_back(std::move(*r));
      return true;
    }
  }
}

bool http_server::impl::finish(exchange& ex, generation& gen, std::vector<protocol::reply> pending,
                               httplib::Response& res) {
  for (const protocol::reply& r : pending) gen.apply(r);
  while (!gen.done()) {
    if (stopping || ex.overflowed()) {
      const status why = stopping ? unavailable("the server is shutting down")
                                  : resource_exhausted("the output outgrew this exchange's reply queue");
      ex.abort(why.message());
      reply_error(res, why);
      return false;
    }
    if (std::optional<protocol::reply> r = ex.next(k_poll)) gen.apply(*r);
  }
  if (!gen.error().ok()) {
    ex.abort(gen.error().message());  // samples still running have no one to answer
    reply_error(res, gen.error());
    return false;
  }
  for (size_t i = 0; i < gen.size(); ++i) {
    if (gen.sample(i).final.reason == protocol::finish_reason::error) {
      reply_error(res, status_from_text(gen.sample(i).final.error_message));
      return false;
    }
  }
  return true;
}

namespace {

struct stream_state {
  http_server::impl* server = nullptr;
  std::shared_ptr<exchange> ex;
  std::shared_ptr<generation> gen;
  std::vector<protocol::reply> pending;
  stream_fn on_reply;
  stream_end_fn on_end;
  std::shared_ptr<void> keep;
};

// Replies one provider call writes at most, so a fast engine cannot starve the socket check.
constexpr int k_replies_per_write = 256;

}  // namespace

void http_server::impl::stream(httplib::Response& res, std::shared_ptr<exchange> ex,
                               std::shared_ptr<generation> gen, std::vector<protocol::reply> pending,
                               stream_fn on_reply, stream_end_fn on_end, std::shared_ptr<void> keep) {
  auto st = std::make_shared<stream_state>();
  *st = {this,
         std::move(ex),
         std::move(gen),
         std::move(pending),
         std::move(on_reply),
         std::move(on_end),
         std::move(keep)};
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) {
        std::string out;
        auto take = [&](const protocol::reply& r) { out += st->on_reply(*st->gen, st->gen->apply(r), r); };
        if (!st->pending.empty()) {
          for (const protocol::reply& r : st->pending) take(r);
          st->pending.clear();
        } else if (std::optional<protocol::reply> r = st->ex->next(k_poll)) {
          take(*r);
          for (int k = 1; k < k_replies_per_write && !st->gen->done() &&
                          (r = st->ex->next(std::chrono::milliseconds(0)));
               ++k)
            take(*r);
        }
        const bool done = st->gen->done();
        if (done && !st->gen->error().ok()) {  // after the first token: an event, as docs/http.md says
          out += sse_event(error_body(st->gen->error()));
          st->ex->abort(st->gen->error().message());
        }
        if (done) out += st->on_end(*st->gen);
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          st->ex->abort("the client went away");
          return false;
        }
        if (done) {
          sink.done();
          return true;
        }
        if (st->server->stopping || st->ex->overflowed() || (out.empty() && !sink.is_writable())) {
          st->ex->abort("the stream ended early");
          return false;
        }
        return true;
      },
      [st](bool success) {
        if (!success) st->ex->abort("the stream ended early");
      });
}

// -- answers ----------------------------------------------------------------------

void http_server::impl::reply_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(json_text(body), "application/json");
}

void http_server::impl::reply_error(httplib::Response& res, const status& s, bool from_parser) {
  reply_json(res, http_status_of(s.code()), error_body(s, from_parser));
}

bool http_server::impl::read_json(const httplib::Request& req, const httplib::ContentReader& reader,
                                  httplib::Response& res, json* out) {
  // A request with neither header has no body (RFC 9112 §6.3; `curl -X POST` sends such); the
  // reader would wait for the connection to close instead.
  if (!req.has_header("Content-Length") &&
      req.get_header_value("Transfer-Encoding").find("chunked") == std::string::npos) {
    *out = json::object();
    return true;
  }
  std::string body;
  bool over = false;
  const size_t max = params.max_body_bytes;
  const bool ok = reader([&](const char* data, size_t n) {
    if (body.size() + n > max) {
      over = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (over || res.status == 413) {
    // The rest of a chunked body was not read: this connection cannot carry another request.
    res.set_header("Connection", "close");
    reply_json(res, 413,
               error_body(invalid_argument(
                   "request body: larger than this server's limit of %zu bytes (--http-max-body)", max)));
    return false;
  }
  if (!ok) {
    reply_error(res, invalid_argument("request body: could not be read"));
    return false;
  }
  if (body.empty()) {
    *out = json::object();
    return true;
  }
  status_or<json> j = parse_body(body);
  if (!j.ok()) {
    reply_error(res, j.get_status());
    return false;
  }
  *out = std::move(j).value();
  return true;
}

// -- the server -------------------------------------------------------------------

http_server::http_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

http_server::~http_server() {
  stop();
}

std::string http_server::endpoint() const {
  std::string host;
  int port = 0;
  (void)split_host_port(impl_->params.bind, &host, &port);
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(impl_->port);
}

void http_server::stop() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  impl_->srv.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

status_or<std::unique_ptr<http_server>> http_server::start(const http_params& params, submit_fn submit,
                                                           weights_fn weights) {
  HART_RETURN_IF_ERROR(params.validate());
  auto p = std::make_unique<impl>();
  p->params = params;
  p->model_path = params.model_path;
  p->submit = std::move(submit);
  p->weights = std::move(weights);
  httplib::Server& srv = p->srv;
  const size_t threads = size_t(params.threads);
  srv.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  srv.set_payload_max_length(params.max_body_bytes);
  const std::string key = params.api_key;
  srv.set_pre_routing_handler([key](const httplib::Request& req, httplib::Response& res) {
    if (key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    const std::string got = req.get_header_value("Authorization"), want = "Bearer " + key;
    unsigned diff = got.size() != want.size();  // compared in full: no timing hint of a prefix
    for (size_t i = 0; i < want.size(); ++i)
      diff |= unsigned(i < got.size() ? got[i] : 0) ^ unsigned(want[i]);
    if (diff == 0) return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("WWW-Authenticate", "Bearer");
    impl::reply_json(res, 401,
                     {{"error",
                       {{"message", "missing or wrong API key (Authorization: Bearer ...)"},
                        {"type", "invalid_request_error"},
                        {"param", nullptr},
                        {"code", "invalid_api_key"}}}});
    return httplib::Server::HandlerResponse::Handled;
  });
  const size_t max_body = params.max_body_bytes;
  srv.set_error_handler(
      httplib::Server::HandlerWithResponse([max_body](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // answered already
        status s = res.status == 404 ? not_found("no endpoint %s %s", req.method.c_str(), req.path.c_str())
                   : res.status == 413
                       ? invalid_argument(
                             "request body: larger than this server's limit of %zu bytes (--http-max-body)",
                             max_body)
                       : invalid_argument("malformed HTTP request (status %d)", res.status);
        const int code = res.status;
        impl::reply_json(res, code, error_body(s));
        return httplib::Server::HandlerResponse::Handled;
      }));
  srv.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    HART_LOG_ERROR("http: handler threw: %s", what.c_str());
    impl::reply_error(res, internal_error("http handler: %s", what.c_str()));
  });
  add_info_routes(*p);
  add_openai_routes(*p);
  add_sglang_routes(*p);
  add_weights_routes(*p);

  std::string host;
  int port = 0;
  HART_RETURN_IF_ERROR(split_host_port(params.bind, &host, &port));
  if (port == 0) {
    p->port = srv.bind_to_any_port(host);
    if (p->port <= 0) return unavailable("http bind '%s': cannot bind", params.bind.c_str());
  } else {
    if (!srv.bind_to_port(host, port))
      return unavailable("http bind '%s': cannot bind (in use?)", params.bind.c_str());
    p->port = port;
  }
  impl* raw = p.get();
  p->thread = std::thread([raw] { raw->srv.listen_after_bind(); });
  return std::unique_ptr<http_server>(new http_server(std::move(p)));
}

}  // namespace hart::http
