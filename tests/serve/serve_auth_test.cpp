// `hart serve` with CURVE keys from files and an allowlist of client keys
// (issue 27, finding 5): a listed client's commands (stats, push-weights) get
// in, a client with another key, or none, does not — on the message API and on
// weight sync alike; a secret key file others can read is refused before the
// model loads; `hart curve-keygen` writes the pairs and never overwrites one.
#include "tests/command_run.h"
#include "tests/serve/server_process.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace hart::testing {
namespace {

std::string tiny_a() {
  return std::string(HART_TEST_DATA) + "/tiny-a";
}
std::string hart() {
  return std::string("OMP_WAIT_POLICY=PASSIVE timeout -k 5 60 ") + HART_BINARY + " --log warn ";
}

struct key_dir {
  std::string path =
      (std::filesystem::temp_directory_path() / ("hart-auth-" + std::to_string(::getpid()))).string();
  key_dir() { std::filesystem::create_directories(path); }
  ~key_dir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& f) const { return path + "/" + f; }
};

// `hart curve-keygen -o PREFIX`: the public key it prints (its stdout line; stderr says where it wrote).
std::string keygen(const std::string& prefix) {
  const command_result r = command_run("{ " + hart() + "curve-keygen -o " + prefix + " 2>/dev/null; }");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.size(), 41u) << r.out;
  return r.out.substr(0, 40);
}

TEST(serve_auth, only_allowlisted_clients_reach_the_api_and_weight_sync) {
  key_dir d;
  const std::string server_pub = keygen(d / "server");
  const std::string a_pub = keygen(d / "a");
  keygen(d / "b");
  const command_result again = command_run(hart() + "curve-keygen -o " + (d / "a"));
  EXPECT_EQ(again.exit_code, 1) << again.out;
  EXPECT_NE(again.out.find("not overwriting"), std::string::npos) << again.out;
  {
    std::ofstream out(d / "clients");
    out << "# the trainer\n" << a_pub << "\n";
  }
  server_process srv(tiny_a(), {"--curve-secret-key-file", d / "server.key", "--curve-allowed-clients",
                                d / "clients", "--weight-sync-endpoint", "tcp://127.0.0.1:*"});
  ASSERT_FALSE(srv.endpoint().empty());
  while (srv.weight_sync_endpoint().empty() && !srv.line().empty()) {
  }
  ASSERT_FALSE(srv.weight_sync_endpoint().empty());
  const std::string curve = " --curve-server-key '" + server_pub + "' --curve-client-key-file ";

  const command_result a = command_run(hart() + "stats --connect " + srv.endpoint() + curve + (d / "a.key"));
  EXPECT_EQ(a.exit_code, 0) << a.out;
  EXPECT_NE(a.out.find("hart_running"), std::string::npos) << a.out;
  for (const std::string& who :
       {curve + (d / "b.key"), std::string(" --curve-server-key '") + server_pub + "'", std::string()}) {
    SCOPED_TRACE(who);
    const command_result r =
        command_run(hart() + "stats --connect-timeout-ms 1500 --connect " + srv.endpoint() + who);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("no hart server answered"), std::string::npos) << r.out;
  }

  const std::string push =
      hart() + "push-weights -m " + tiny_a() + " --endpoint " + srv.weight_sync_endpoint();
  const command_result pa = command_run(push + " --version 2" + curve + (d / "a.key"));
  EXPECT_EQ(pa.exit_code, 0) << pa.out;
  const command_result pb =
      command_run(push + " --version 3 --lanes 4 --timeout-ms 2000" + curve + (d / "b.key"));
  EXPECT_EQ(pb.exit_code, 1) << pb.out;
  const command_result after =
      command_run(hart() + "stats --connect " + srv.endpoint() + curve + (d / "a.key"));
  EXPECT_NE(after.out.find("hart_weight_version 2"), std::string::npos)
      << after.out;  // b's push never landed
  EXPECT_NE(after.out.find("hart_auth_refused "), std::string::npos) << after.out;
  EXPECT_EQ(after.out.find("hart_auth_refused 0\n"), std::string::npos)
      << after.out;  // b and the keyless pair
}

TEST(serve_auth, key_files_are_checked_before_the_model_loads) {
  key_dir d;
  keygen(d / "server");
  ::chmod((d / "server.key").c_str(), 0644);
  const command_result loose =
      command_run(hart() + "serve -m " + tiny_a() + " --curve-secret-key-file " + (d / "server.key"));
  EXPECT_EQ(loose.exit_code, 1) << loose.out;
  EXPECT_NE(loose.out.find("chmod 600"), std::string::npos) << loose.out;
  ::chmod((d / "server.key").c_str(), 0600);
  const command_result no_secret =
      command_run(hart() + "serve -m " + tiny_a() + " --curve-allowed-clients " + (d / "server.pub"));
  EXPECT_EQ(no_secret.exit_code, 1) << no_secret.out;
  EXPECT_NE(no_secret.out.find("--curve-allowed-clients needs --curve-secret-key-file"), std::string::npos)
      << no_secret.out;
}

}  // namespace
}  // namespace hart::testing
