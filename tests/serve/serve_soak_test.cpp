// The short soak in CI (issue 27): `hart soak` against a `hart serve` on tiny-a, with aborts,
// dropped connections, pauses in every mode and weight pushes while requests run. It must
// lose no request (every one ends with its finals or an error), hold no page after the flush
// and push every version. scripts/soak.sh runs the long one (10,000 requests).
#include "tests/command_run.h"
#include "tests/serve/server_process.h"

#include <gtest/gtest.h>

#include <string>

namespace hart::testing {
namespace {

TEST(serve_soak, a_short_soak_loses_and_leaks_nothing) {
  const std::string tiny_a = std::string(HART_TEST_DATA) + "/tiny-a";
  server_process srv(tiny_a, {"--weight-sync-endpoint", "tcp://127.0.0.1:*"});
  ASSERT_FALSE(srv.endpoint().empty());
  while (srv.weight_sync_endpoint().empty() && !srv.line().empty()) {
  }
  ASSERT_FALSE(srv.weight_sync_endpoint().empty());
  const command_result r = command_run(
      std::string("OMP_WAIT_POLICY=PASSIVE timeout -k 5 300 ") + HART_BINARY + " --log warn soak --connect " +
      srv.endpoint() + " --requests 160 --users 4 --max-new-tokens 24 --pause-ms 400 --push-ms 1500 -m " +
      tiny_a + " --weight-sync-endpoint " + srv.weight_sync_endpoint() + " --server-pid " +
      std::to_string(srv.pid()));
  std::printf("%s", r.out.c_str());
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("soak: 160 requests"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" 0 lost;"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 pages held after flush"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(0 failed)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" 0 weight pushes"), std::string::npos) << r.out;  // some pushes landed mid-run
  EXPECT_EQ(r.out.find(" 0 pauses"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace hart::testing
