// POST /generate: SGLang's request to the gateway, its answer whole or as cumulative
// server-sent events (sglang_api.h); named by its rid for /abort_request.
#include "runtime/http/http_server_impl.h"
#include "runtime/http/openai_api.h"
#include "runtime/http/sglang_api.h"

namespace hart::http {
namespace {

using httplib::ContentReader;
using httplib::Request;
using httplib::Response;

struct sglang_exchange {
  sglang_request request;
  sglang_context ctx;
  std::shared_ptr<http_server::impl::tracked> name;
};

void generate(http_server::impl& s, const Request& req, const ContentReader& reader, Response& res) {
  json body;
  if (!s.read_json(req, reader, res, &body)) return;
  status_or<sglang_request> r = parse_generate_request(body);
  if (!r.ok()) return http_server::impl::reply_error(res, r.get_status(), /*from_parser=*/true);
  if (status st = tokenize_prompt(s.params.tok, &*r); !st.ok())
    return http_server::impl::reply_error(res, st, /*from_parser=*/true);
  auto x = std::make_shared<sglang_exchange>();
  x->request = std::move(r).value();
  std::shared_ptr<exchange> ex = s.new_exchange();
  x->name = s.track(x->request.rid, ex);
  x->ctx = {x->name->rid(), s.params.tok};
  auto gen = std::make_shared<generation>(x->request.g.sampling, s.params.eos_token_id);
  std::vector<protocol::reply> pending;
  if (!s.start(*ex, x->request.g, *gen, &pending, res)) return;
  if (!x->request.stream) {
    if (s.finish(*ex, *gen, std::move(pending), res))
      http_server::impl::reply_json(res, 200, sglang_response(x->request, *gen, x->ctx));
    return;
  }
  sglang_exchange* raw = x.get();
  s.stream(
      res, ex, gen, std::move(pending),
      [raw](const generation& g, int i, const protocol::reply& rep) {
        return sglang_stream_event(raw->request, g, i, rep, raw->ctx);
      },
      [](const generation&) { return std::string(k_sse_done); }, x);
}

}  // namespace

void add_sglang_routes(http_server::impl& s) {
  s.srv.Post("/generate", [&s](const Request& req, Response& res, const ContentReader& reader) {
    generate(s, req, reader, res);
  });
}

}  // namespace hart::http
