// POST /v1/chat/completions and /v1/completions: OpenAI's request to the gateway, its answer
// whole or as server-sent events (openai_api.h).
#include "runtime/http/http_server_impl.h"
#include "runtime/http/openai_api.h"
#include "runtime/text/chat_template.h"

#include <cstdio>
#include <ctime>

namespace hart::http {
namespace {

using httplib::ContentReader;
using httplib::Request;
using httplib::Response;

// What a stream's formatter refers to, kept alive until the stream ends.
struct openai_exchange {
  openai_request request;
  openai_context ctx;
  std::unique_ptr<openai_stream> stream;
  std::shared_ptr<http_server::impl::tracked> name;
};

void completions(http_server::impl& s, bool chat, const Request& req, const ContentReader& reader,
                 Response& res) {
  json body;
  if (!s.read_json(req, reader, res, &body)) return;
  status_or<openai_request> r = parse_openai_request(body, chat, s.params.model_name);
  if (!r.ok()) return http_server::impl::reply_error(res, r.get_status(), /*from_parser=*/true);
  auto x = std::make_shared<openai_exchange>();
  x->request = std::move(r).value();
  std::shared_ptr<exchange> ex = s.new_exchange();
  char id[32];
  std::snprintf(id, sizeof id, "%016llx",
                (unsigned long long)(uint64_t(std::time(nullptr)) << 24 ^ s.serial.load()));
  x->ctx = {(chat ? "chatcmpl-" : "cmpl-") + std::string(id), int64_t(std::time(nullptr)),
            s.params.model_name, s.params.tok};
  // Named so /abort_request {"abort_all": true} reaches OpenAI requests too.
  x->name = s.track("", ex);
  auto gen = std::make_shared<generation>(x->request.g.sampling, s.params.eos_token_id);
  if (x->request.g.thinking)
    gen->split_reasoning(s.params.tok ? s.params.tok->token_id(chat_tokens::think_end) : std::nullopt);
  std::vector<protocol::reply> pending;
  if (!s.start(*ex, x->request.g, *gen, &pending, res)) return;
  if (!x->request.stream) {
    if (s.finish(*ex, *gen, std::move(pending), res))
      http_server::impl::reply_json(res, 200, openai_response(x->request, *gen, x->ctx));
    return;
  }
  x->stream = std::make_unique<openai_stream>(x->request, x->ctx);
  openai_stream* fmt = x->stream.get();
  s.stream(
      res, ex, gen, std::move(pending),
      [fmt](const generation& g, int i, const protocol::reply& rep) { return fmt->on_reply(g, i, rep); },
      [fmt](const generation& g) { return fmt->end(g); }, x);
}

}  // namespace

void add_openai_routes(http_server::impl& s) {
  s.srv.Post("/v1/chat/completions", [&s](const Request& req, Response& res, const ContentReader& reader) {
    completions(s, true, req, reader, res);
  });
  s.srv.Post("/v1/completions", [&s](const Request& req, Response& res, const ContentReader& reader) {
    completions(s, false, req, reader, res);
  });
}

}  // namespace hart::http
