// Bad request fields against a real `hart serve` on 127.0.0.1 (issue 18): every bad numeric
// (and prompt) field of a generate, sent as Cap'n Proto over the wire or as a JSON line through
// the real `hart client` binary, comes back as one typed error carrying the request's id (a
// control verb's: its tag); nothing else changes: a generation running meanwhile yields the
// same tokens as alone, no page leaks, and good requests on the same connection still work.
#include "runtime/protocol/codec.h"
#include "runtime/transport/client.h"
#include "tests/serve/server_process.h"
#include "tests/serve/server_stats.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace hart::testing {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

// The server's --max-context: a longer prompt is refused before it starts.
constexpr int k_max_context = 512;

class request_validation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    srv_ = new server_process(
        std::string(HART_TEST_DATA) + "/tiny-a",
        {"--full-pages", "32", "--swa-pages", "16", "--max-context", std::to_string(k_max_context)});
  }
  static void TearDownTestSuite() { delete srv_; }

  std::unique_ptr<transport::client> connect() {
    EXPECT_FALSE(srv_->endpoint().empty()) << "the server did not print its endpoint";
    transport::client_params p;
    p.endpoint = srv_->endpoint();
    auto c = transport::client::connect(p);
    EXPECT_TRUE(c.ok()) << c.get_status().to_string();
    return std::move(c).value();
  }

  // The next reply that is not a chunk or final (those go to `streamed`).
  static protocol::reply control(transport::client& c, protocol::control_verb verb, uint64_t tag) {
    protocol::control_request q;
    q.tag = tag;
    q.verb = verb;
    EXPECT_TRUE(c.send(protocol::request{q}).ok());
    for (;;) {
      auto r = c.receive(20s);
      EXPECT_TRUE(r.ok()) << r.get_status().to_string();
      if (!r.ok()) return protocol::error_reply{};
      if (!std::holds_alternative<protocol::chunk_event>(*r) &&
          !std::holds_alternative<protocol::final_event>(*r))
        return *r;
    }
  }

  // After a flush nothing holds a page and nothing runs.
  static void expect_nothing_held(transport::client& c) {
    std::map<std::string, double> st = stats_after_flush(c, 90);
    for (const char* k : {"cache_full_pages_used", "cache_swa_pages_used", "running", "queue_depth"}) {
      ASSERT_TRUE(st.count(k)) << k;
      EXPECT_EQ(st[k], 0.0) << k;
    }
  }

  static server_process* srv_;
};

server_process* request_validation::srv_ = nullptr;

protocol::generate_request good_request(uint64_t id, uint32_t n_new) {
  protocol::generate_request g;
  g.request_id = id;
  g.kind = protocol::prompt_kind::token_ids;
  for (int k = 0; k < 24; ++k) g.token_ids.push_back(uint32_t((k * 37) % 400 + 6));
  g.sampling.temperature = 0;
  g.sampling.max_new_tokens = n_new;
  g.sampling.ignore_eos = true;
  return g;
}

// Encodes without the client's validation (transport::client::send would refuse these).
status send_unchecked(transport::client& c, const protocol::request& r) {
  auto enc = protocol::encode_request(r);
  if (!enc.ok()) return enc.get_status();
  return c.send_frames({std::string(enc->header.begin(), enc->header.end()),
                        std::string(enc->payload.begin(), enc->payload.end())});
}

struct bad_case {
  const char* name;
  std::function<void(protocol::generate_request&)> mutate;
  status_code code;
  const char* needle;  // in the error message: the field, as the server names it
};

TEST_F(request_validation, each_bad_field_over_the_wire_gets_a_typed_error_with_its_id) {
  const float nan = std::nanf(""), inf = HUGE_VALF;
  using sc = status_code;
  const std::vector<bad_case> cases = {
      {"temperature NaN", [=](auto& g) { g.sampling.temperature = nan; }, sc::invalid_argument,
       "temperature"},
      {"temperature Inf", [=](auto& g) { g.sampling.temperature = inf; }, sc::invalid_argument,
       "temperature"},
      {"temperature < 0", [](auto& g) { g.sampling.temperature = -1.0f; }, sc::invalid_argument,
       "temperature"},
      {"temperature > max", [](auto& g) { g.sampling.temperature = 101.0f; }, sc::invalid_argument,
       "temperature"},
      {"top_p 0", [](auto& g) { g.sampling.top_p = 0.0f; }, sc::invalid_argument, "topP"},
      {"top_p > 1", [](auto& g) { g.sampling.top_p = 1.5f; }, sc::invalid_argument, "topP"},
      {"top_p NaN", [=](auto& g) { g.sampling.top_p = nan; }, sc::invalid_argument, "topP"},
      {"top_k 0", [](auto& g) { g.sampling.top_k = 0; }, sc::invalid_argument, "topK"},
      {"top_k -7", [](auto& g) { g.sampling.top_k = -7; }, sc::invalid_argument, "topK"},
      {"min_p NaN", [=](auto& g) { g.sampling.min_p = nan; }, sc::invalid_argument, "minP"},
      {"min_p < 0", [](auto& g) { g.sampling.min_p = -0.5f; }, sc::invalid_argument, "minP"},
      {"min_p > 1", [=](auto& g) { g.sampling.min_p = inf; }, sc::invalid_argument, "minP"},
      {"max_new_tokens 0", [](auto& g) { g.sampling.max_new_tokens = 0; }, sc::invalid_argument,
       "maxNewTokens"},
      {"min > max new tokens", [](auto& g) { g.sampling.min_new_tokens = 17; }, sc::invalid_argument,
       "minNewTokens"},
      {"n 0", [](auto& g) { g.sampling.n = 0; }, sc::invalid_argument, "sampling.n"},
      {"n over the wire limit", [](auto& g) { g.sampling.n = protocol::max_samples + 1; },
       sc::invalid_argument, "sampling.n"},
      {"n over the server's", [](auto& g) { g.sampling.n = 65; }, sc::invalid_argument, "n 65"},
      {"top_logprobs 21", [](auto& g) { g.sampling.top_logprobs = 21; }, sc::invalid_argument, "topLogprobs"},
      {"17 stop strings", [](auto& g) { g.sampling.stop.assign(17, "x"); }, sc::invalid_argument,
       "sampling.stop"},
      {"empty stop string", [](auto& g) { g.sampling.stop = {""}; }, sc::invalid_argument,
       "sampling.stop[0]"},
      {"65 stop ids", [](auto& g) { g.sampling.stop_token_ids.assign(65, 1); }, sc::invalid_argument,
       "stopTokenIds"},
      {"stop id outside the vocabulary",
       [](auto& g) {
         g.sampling.stop_token_ids = {3, 4000000000u};
       },
       sc::out_of_range, "stop token id 4000000000"},
      {"token outside the vocabulary", [](auto& g) { g.token_ids.push_back(100000); }, sc::out_of_range,
       "vocabulary"},
      {"empty token prompt", [](auto& g) { g.token_ids.clear(); }, sc::invalid_argument, "empty prompt"},
      {"prompt over max_context", [](auto& g) { g.token_ids.assign(k_max_context, 7); }, sc::out_of_range,
       "max_context"},
      {"empty text prompt",
       [](auto& g) {
         g.kind = protocol::prompt_kind::text;
         g.text.clear();
       },
       sc::invalid_argument, "empty prompt"},
      {"text not UTF-8",
       [](auto& g) {
         g.kind = protocol::prompt_kind::text;
         g.text = "bad \xC3\x28";
       },
       sc::invalid_argument, "UTF-8"},
      {"empty role",
       [](auto& g) {
         g.kind = protocol::prompt_kind::messages;
         g.messages = {{"", "hi"}};
       },
       sc::invalid_argument, "role"},
      {"session id too long", [](auto& g) { g.session_id.assign(300, 's'); }, sc::invalid_argument,
       "sessionId"},
  };

  auto c = connect();
  // A generation runs while the bad requests come in; it must not notice them.
  constexpr uint64_t k_running = 1000;
  ASSERT_TRUE(c->send(protocol::request{good_request(k_running, 24)}).ok());
  for (size_t i = 0; i < cases.size(); ++i) {
    protocol::generate_request g = good_request(2000 + i, 16);
    cases[i].mutate(g);
    ASSERT_TRUE(send_unchecked(*c, protocol::request{g}).ok()) << cases[i].name;
  }
  // Control verbs: a bad field is answered with the verb's tag.
  protocol::control_request abort_none;
  abort_none.tag = 77;
  abort_none.verb = protocol::control_verb::abort;  // request id 0 and not all
  ASSERT_TRUE(send_unchecked(*c, protocol::request{abort_none}).ok());
  protocol::control_request pause_bad;
  pause_bad.tag = 78;
  pause_bad.verb = protocol::control_verb::pause;
  pause_bad.mode = static_cast<protocol::pause_mode>(9);
  ASSERT_TRUE(send_unchecked(*c, protocol::request{pause_bad}).ok());

  std::map<uint64_t, protocol::error_reply> errors, control_errors;
  std::vector<uint32_t> running_tokens;
  bool running_done = false;
  while (!running_done || errors.size() + control_errors.size() < cases.size() + 2) {
    auto r = c->receive(60s);
    ASSERT_TRUE(r.ok()) << r.get_status().to_string() << " (" << errors.size() << " errors so far)";
    if (const auto* e = std::get_if<protocol::error_reply>(&*r)) {
      auto& into = e->tag ? control_errors : errors;
      EXPECT_TRUE(into.emplace(e->tag ? e->tag : e->request_id, *e).second)
          << "two errors for " << e->request_id;
    } else if (const auto* ch = std::get_if<protocol::chunk_event>(&*r)) {
      ASSERT_EQ(ch->request_id, k_running) << "a refused request streamed";
      running_tokens.insert(running_tokens.end(), ch->token_ids.begin(), ch->token_ids.end());
    } else if (const auto* f = std::get_if<protocol::final_event>(&*r)) {
      ASSERT_EQ(f->request_id, k_running) << "a refused request got a final";
      EXPECT_EQ(f->reason, protocol::finish_reason::length);
      running_done = true;
    } else {
      ADD_FAILURE() << "unexpected reply " << r->index();
    }
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    auto it = errors.find(2000 + i);
    ASSERT_NE(it, errors.end()) << cases[i].name << ": no error with the request id";
    const protocol::error_reply& e = it->second;
    EXPECT_EQ(e.code, cases[i].code) << cases[i].name << ": " << e.message;
    EXPECT_EQ(e.tag, 0u) << cases[i].name;
    EXPECT_NE(e.message.find(cases[i].needle), std::string::npos) << cases[i].name << ": " << e.message;
    // The reply carries the client's id; the text names no server-internal request id.
    EXPECT_EQ(e.message.find("request "), std::string::npos) << cases[i].name << ": " << e.message;
  }
  ASSERT_EQ(control_errors.count(77), 1u);
  EXPECT_EQ(control_errors[77].code, status_code::invalid_argument);
  EXPECT_NE(control_errors[77].message.find("abort.requestId"), std::string::npos)
      << control_errors[77].message;
  ASSERT_EQ(control_errors.count(78), 1u);
  EXPECT_NE(control_errors[78].message.find("pause.mode"), std::string::npos) << control_errors[78].message;

  // The same request again, alone, on the same connection: the same tokens.
  auto again = c->generate(good_request(k_running + 1, 24), 60s);
  ASSERT_TRUE(again.ok()) << again.get_status().to_string();
  EXPECT_EQ(again->samples[0].token_ids, running_tokens);
  EXPECT_EQ(running_tokens.size(), 24u);
  expect_nothing_held(*c);
}

struct run_result {
  int exit_code = -1;
  std::vector<json> lines;  // stdout, one JSON value per line
  std::string raw;          // stdout as printed
  std::string err;          // stderr: "hart: error: ..." when the client itself failed
};

// `hart client` as a user runs it: the lines on stdin, the replies on stdout.
run_result run_client(const std::string& endpoint, const std::vector<std::string>& input) {
  char tmpl[] = "/tmp/hart_client_XXXXXX";
  EXPECT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, in = dir + "/in.jsonl", err = dir + "/err";
  {
    std::ofstream f(in);
    for (const std::string& l : input) f << l << "\n";
  }
  const std::string cmd = std::string(HART_BINARY) + " --log warn client --connect " + endpoint +
                          " --timeout-ms 30000 < " + in + " 2> " + err;
  run_result r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[8192];
  while (std::fgets(buf, sizeof buf, p)) {
    r.raw += buf;
    json j = json::parse(buf, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "not a JSON line: " << buf;
    if (!j.is_discarded()) r.lines.push_back(std::move(j));
  }
  const int st = pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream e(err);
  r.err = std::string(std::istreambuf_iterator<char>(e), {});
  std::filesystem::remove_all(dir);
  return r;
}

// `hart ARGS...` as a terminal user runs it: stdin, stdout and stderr on pipes the test holds
// open, so it can type while the command runs and read what it printed so far.
class hart_process {
 public:
  explicit hart_process(std::vector<std::string> args) {
    args.insert(args.begin(), {HART_BINARY, "--log", "warn"});
    int in[2], out[2], err[2];
    EXPECT_EQ(pipe(in), 0);
    EXPECT_EQ(pipe(out), 0);
    EXPECT_EQ(pipe(err), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], STDIN_FILENO);
      dup2(out[1], STDOUT_FILENO);
      dup2(err[1], STDERR_FILENO);
      for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) close(fd);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(HART_BINARY, argv.data());
      _exit(127);
    }
    for (int fd : {in[0], out[1], err[1]}) close(fd);
    in_ = in[1];
    out_ = out[0];
    err_ = err[0];
  }
  ~hart_process() {
    for (int fd : {in_, out_, err_}) {
      if (fd >= 0) close(fd);
    }
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  hart_process(const hart_process&) = delete;
  hart_process& operator=(const hart_process&) = delete;

  pid_t pid() const { return pid_; }
  /// Types `line` and Enter.
  void say(const std::string& line) {
    const std::string l = line + "\n";
    EXPECT_EQ(write(in_, l.data(), l.size()), ssize_t(l.size()));
  }
  /// Reads stdout (or stderr) into out() (err()) until `done` holds for it or 30 s pass.
  bool read_until(bool from_stderr, const std::function<bool(const std::string&)>& done) {
    std::string& into = from_stderr ? err_text_ : out_text_;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done(into) && std::chrono::steady_clock::now() < deadline) {
      pollfd p{from_stderr ? err_ : out_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[65536];
      const ssize_t n = read(p.fd, buf, sizeof buf);
      if (n <= 0) break;
      into.append(buf, size_t(n));
    }
    return done(into);
  }
  /// The next stdout line as JSON (null after 30 s without one).
  json next_line() {
    if (!read_until(false, [](const std::string& s) { return s.find('\n') != std::string::npos; }))
      return json();
    const size_t nl = out_text_.find('\n');
    json j = json::parse(out_text_.substr(0, nl), nullptr, false);
    out_text_.erase(0, nl + 1);
    return j;
  }
  /// Closes stdin and waits: the exit status (-1 if it did not exit normally).
  int finish() {
    close(in_);
    in_ = -1;
    int st = 0;
    EXPECT_EQ(waitpid(pid_, &st, 0), pid_);
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  const std::string& err() const { return err_text_; }

 private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  std::string out_text_, err_text_;  // read, not yet consumed
};

// `hart client` in a terminal (issue 27, finding 6: it printed nothing until stdin closed, so a
// stream could not be watched or aborted from the same input). stdin and stdout are pipes the
// test holds open: a long generation's chunks appear while stdin is still open, an abort line
// typed then ends it (its ack, then a final of reason abort), and closing stdin ends the client.
TEST_F(request_validation, hart_client_prints_replies_while_its_input_is_open) {
  hart_process client({"client", "--connect", srv_->endpoint(), "--timeout-ms", "30000"});
  client.say(R"({"generate": {"id": 1, "tokens": [5, 6, 7], "max_new_tokens": 100000, "ignore_eos": true}})");
  json l = client.next_line();
  ASSERT_TRUE(l.contains("chunk")) << "no chunk while stdin is open: " << l.dump();
  client.say(R"({"abort": {"id": 1}})");
  bool acked = false, ended = false;
  while (!ended) {
    l = client.next_line();
    ASSERT_FALSE(l.is_null()) << "the abort got no answer";
    if (l.contains("ack")) acked = true;
    if (l.contains("final")) {
      EXPECT_TRUE(acked) << "the final came before the ack";
      EXPECT_EQ(l["final"]["finish_reason"], "abort") << l.dump();
      ended = true;
    }
  }
  EXPECT_EQ(client.finish(), 0);
}

// `hart chat` and Ctrl-C (issue 27, finding 4: it sent no abort, so the server generated on):
// SIGINT while an answer streams aborts it on the server (nothing is left running or held), the
// answer ends with reason abort, and the chat goes on (/quit ends it with exit 0).
TEST_F(request_validation, hart_chat_ctrl_c_aborts_the_answer_on_the_server) {
  hart_process chat({"chat", "--connect", srv_->endpoint(), "-n", "100000", "--ignore-eos"});
  chat.say("hello");
  ASSERT_TRUE(chat.read_until(false, [](const std::string& s) { return s.size() >= 8; }))
      << "no answer streamed";
  ASSERT_EQ(kill(chat.pid(), SIGINT), 0);
  ASSERT_TRUE(
      chat.read_until(true, [](const std::string& s) { return s.find("abort]") != std::string::npos; }))
      << "the answer did not end with abort: " << chat.err();
  // The abort's pages come back through the cache shard just after the final: allow it a moment.
  auto c = connect();
  double held = -1;
  for (int i = 0; i < 100 && held != 0; ++i) {
    if (i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    control(*c, protocol::control_verb::flush_cache, 90);
    auto st = control(*c, protocol::control_verb::stats, 91);
    ASSERT_TRUE(std::holds_alternative<protocol::stats_reply>(st));
    held = 0;
    for (const auto& [k, v] : std::get<protocol::stats_reply>(st).entries) {
      if (k == "cache_full_pages_used" || k == "cache_swa_pages_used" || k == "running" || k == "queue_depth")
        held += v;
    }
  }
  EXPECT_EQ(held, 0) << "the aborted answer still runs or holds pages";
  chat.say("/quit");
  EXPECT_EQ(chat.finish(), 0) << chat.err();
}

TEST_F(request_validation, hart_client_refuses_each_bad_field_by_id_and_serves_the_other_lines) {
  const std::vector<std::string> input = {
      R"({"generate": {"id": 1, "prompt": "Hello", "max_new_tokens": -3}})",
      R"({"generate": {"id": 2, "tokens": [5, 6, 7], "max_new_tokens": 4, "ignore_eos": true}})",
      R"({"generate": {"id": 3, "prompt": "Hello", "temperature": -1}})",
      R"({"generate": {"id": 4, "prompt": ""}})",
      R"({"generate": {"id": 5, "prompt": "Hello", "n": 0}})",
      R"({"generate": {"id": 6, "prompt": "Hello", "top_p": 0}})",
      R"({"generate": {"id": 7, "prompt": "Hello", "top_logprobs": 300}})",
      R"({"generate": {"id": 8, "prompt": "Hello", "seed": -1}})",
      R"({"generate": {"id": 9, "prompt": "Hello", "max_new_tokens": 2.5}})",
      R"({"generate": {"id": 10, "prompt": "Hello", "stop_token_ids": [1, -1]}})",
      R"({"generate": {"id": 11, "prompt": "Hello", "max_tokens": 8}})",
      R"({"generate": {"id": -12, "prompt": "Hello"}})",
      R"({"abort": {"id": 0}})",
      "not json \xff\xfe",  // nor UTF-8
      // Valid JSON the server refuses (token outside the vocabulary, n over its limit): by id.
      R"({"generate": {"id": 20, "tokens": [5, 100000], "max_new_tokens": 2}})",
      R"({"generate": {"id": 21, "tokens": [5, 6], "n": 100, "max_new_tokens": 2}})",
      R"({"generate": {"id": 22, "prompt": "Hello", "max_new_tokens": 3, "ignore_eos": true, "n": 2}})",
      R"({"health": {}})",
  };
  const std::map<json, std::string> refused_here = {{1, "max_new_tokens"},
                                                    {3, "temperature"},
                                                    {4, "prompt"},
                                                    {5, "n"},
                                                    {6, "top_p"},
                                                    {7, "top_logprobs"},
                                                    {8, "seed"},
                                                    {9, "max_new_tokens"},
                                                    {10, "stop_token_ids[1]"},
                                                    {11, "max_tokens"},
                                                    {-12, "id"}};
  const run_result r = run_client(srv_->endpoint(), input);
  EXPECT_EQ(r.exit_code, 1) << "lines were refused: " << r.raw;
  EXPECT_EQ(r.err, "") << "the client ended by itself (every request answered, no timeout)";

  std::map<json, int> errors_by_id;
  std::map<uint64_t, int> finals;
  int health = 0;
  for (const json& l : r.lines) {
    if (l.contains("error")) {
      const json& e = l["error"];
      ++errors_by_id[e["id"]];
      auto it = refused_here.find(e["id"]);
      if (it != refused_here.end()) {
        EXPECT_EQ(e["field"], it->second) << l.dump();
        EXPECT_EQ(e["code"], "invalid_argument") << l.dump();
        EXPECT_EQ(e["tag"], 0) << l.dump();
        EXPECT_EQ(e["message"].get<std::string>().rfind(it->second + ":", 0), 0u) << l.dump();
      } else if (e["id"] == 20) {
        EXPECT_EQ(e["code"], "out_of_range") << l.dump();
        EXPECT_FALSE(e.contains("field")) << "the server's error: " << l.dump();
      } else if (e["id"] == 21) {
        EXPECT_EQ(e["code"], "invalid_argument") << l.dump();
        EXPECT_NE(e["message"].get<std::string>().find("n 100"), std::string::npos) << l.dump();
      } else if (e["id"] == 0 && e.value("field", "") == "id") {
        EXPECT_GT(e["tag"].get<uint64_t>(), 0u) << "an abort's error carries its tag: " << l.dump();
      } else if (e["id"].is_null()) {
        EXPECT_NE(e["message"].get<std::string>().find("not JSON"), std::string::npos) << l.dump();
      } else {
        ADD_FAILURE() << "unexpected error " << l.dump();
      }
    } else if (l.contains("final")) {
      ++finals[l["final"]["id"].get<uint64_t>()];
      EXPECT_EQ(l["final"]["finish_reason"], "length") << l.dump();
      EXPECT_EQ(l["final"].value("weight_version", -1), 0) << "the weights that made it: " << l.dump();
    } else if (l.contains("chunk")) {
      EXPECT_EQ(l["chunk"].value("weight_version", -1), 0) << l.dump();
    } else if (l.contains("health")) {
      ++health;
    }
  }
  for (const auto& [id, field] : refused_here) EXPECT_EQ(errors_by_id[id], 1) << "id " << id << ": " << r.raw;
  EXPECT_EQ(errors_by_id[20], 1) << r.raw;
  EXPECT_EQ(errors_by_id[21], 1) << r.raw;
  EXPECT_EQ(errors_by_id[0], 1) << "the abort of id 0: " << r.raw;
  EXPECT_EQ(errors_by_id[json()], 1) << "the line that is not JSON: " << r.raw;
  EXPECT_EQ(finals, (std::map<uint64_t, int>{{2, 1}, {22, 2}})) << r.raw;
  EXPECT_EQ(health, 1) << r.raw;

  // All good lines: exit 0.
  const run_result ok =
      run_client(srv_->endpoint(), {R"({"generate": {"id": 1, "prompt": "Hello", "max_new_tokens": 2}})"});
  EXPECT_EQ(ok.exit_code, 0) << ok.raw << ok.err;
  EXPECT_EQ(ok.err, "");
  auto c = connect();
  expect_nothing_held(*c);
}

}  // namespace
}  // namespace hart::testing
