#include "actors/cli/cli_common.h"

#include <cstdio>
#include <type_traits>
#include <variant>

#include "runtime/transport/client.h"
#include "runtime/transport/curve_auth.h"

namespace hart::cli {

int fail(const status& s) {
  std::fprintf(stderr, "hart: error: %s\n", s.to_string().c_str());
  return 1;
}

status_or<std::unique_ptr<engine>> load_engine(const common_options& o) {
  engine_params p;
  p.model_dir = o.model_dir;
  p.n_threads = o.threads;
  p.deterministic = o.deterministic;
  p.verbose_load = true;
  if (!precision_parse(o.precision_name, &p.prec)) {
    return invalid_argument("unknown precision '%s' (exact or fp8)", o.precision_name.c_str());
  }
  return engine::load(p);
}

status curve_client_keys(const curve_client_options& o, std::string* server_key, std::string* secret_key) {
  if (o.server_key.empty()) {
    if (!o.client_key_file.empty()) return invalid_argument("--curve-client-key-file needs --curve-server-key");
    return {};
  }
  *server_key = o.server_key;
  if (!o.client_key_file.empty()) {
    HART_ASSIGN_OR_RETURN(*secret_key, transport::curve_key_file_read(o.client_key_file, /*secret=*/true));
  }
  return {};
}

status_or<protocol::reply> control_call(transport::client& c, const protocol::control_request& q,
                                        std::chrono::milliseconds timeout) {
  HART_RETURN_IF_ERROR(c.send(protocol::request{q}));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return unavailable("no answer to control request %llu", (unsigned long long)q.tag);
    HART_ASSIGN_OR_RETURN(protocol::reply r, c.receive(left));
    if (const auto* e = std::get_if<protocol::error_reply>(&r); e && e->tag == q.tag) return status(e->code, e->message);
    const uint64_t tag = std::visit(
        [](const auto& v) -> uint64_t {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, protocol::ack_reply> || std::is_same_v<T, protocol::health_reply> ||
                        std::is_same_v<T, protocol::stats_reply> || std::is_same_v<T, protocol::weight_version_reply>) {
            return v.tag;
          } else {
            return 0;
          }
        },
        r);
    if (tag == q.tag) return r;
  }
}

double stat_value(const protocol::stats_reply& s, const char* name) {
  for (const auto& [k, v] : s.entries) {
    if (k == name) return v;
  }
  return -1;
}

int run_curve_keygen(const std::string& prefix) {
  if (status st = transport::curve_keypair_write(prefix); !st.ok()) return fail(st);
  auto pub = transport::curve_key_file_read(prefix + ".pub", /*secret=*/false);
  if (!pub.ok()) return fail(pub.get_status());
  std::printf("%s\n", pub->c_str());
  std::fflush(stdout);  // the key first, then where it went
  std::fprintf(stderr, "hart: wrote %s.key (secret, mode 600) and %s.pub\n", prefix.c_str(), prefix.c_str());
  return 0;
}

status_or<tokenizer> load_tokenizer(const std::string& model_dir) {
  return tokenizer::load(model_dir + "/tokenizer.json");
}

}  // namespace hart::cli
