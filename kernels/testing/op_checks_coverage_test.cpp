// `hart check-ops` covers exactly the kernels the GPU engine calls, read from
// the sources on any machine (no device, no CUDA build needed): every
// `status <name>_cuda(` declared in a kernels/ header that a runtime/gpu
// source calls must be in some check's `covers`, and every covered name must
// be such a call. A kernels/ entry point the engine does not call must say
// why it is kept (a `NOTE(kept):` comment just above its declaration).
#include "kernels/testing/op_checks.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace hart {
namespace {

namespace fs = std::filesystem;

const fs::path k_root = fs::path(HART_TEST_DATA) / ".." / "..";

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool is_source(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".h" || e == ".cuh" || e == ".cpp" || e == ".cu";
}

// Entry points declared in kernels/ headers, each with the comment lines
// right above its declaration.
std::map<std::string, std::string> kernel_entry_points() {
  std::map<std::string, std::string> out;
  const std::regex decl(R"(^status ([a-z0-9_]+_cuda)\()");
  for (const auto& f : fs::recursive_directory_iterator(k_root / "kernels")) {
    if (f.path().extension() != ".h") continue;
    std::istringstream lines(read(f.path()));
    std::string line, comments;
    for (std::smatch m; std::getline(lines, line);) {
      if (std::regex_search(line, m, decl)) out[m[1]] = comments;
      comments = line.rfind("//", 0) == 0 ? comments + line + "\n" : "";
    }
  }
  return out;
}

// Names `<name>_cuda(` that the engine's non-test sources call.
std::set<std::string> engine_calls() {
  std::set<std::string> out;
  const std::regex call(R"(\b([a-z0-9_]+_cuda)\s*\()");
  for (const auto& f : fs::directory_iterator(k_root / "runtime" / "gpu")) {
    const std::string name = f.path().filename().string();
    if (!is_source(f.path()) || name.find("_test.") != std::string::npos) continue;
    const std::string text = read(f.path());
    for (std::sregex_iterator it(text.begin(), text.end(), call), end; it != end; ++it) out.insert((*it)[1]);
  }
  return out;
}

TEST(op_checks_coverage, check_ops_covers_exactly_the_kernels_the_engine_calls) {
  const std::map<std::string, std::string> declared = kernel_entry_points();
  ASSERT_GT(declared.size(), 10u) << "no kernels/ headers under " << k_root;
  std::set<std::string> called;
  for (const std::string& c : engine_calls()) {
    if (declared.count(c)) called.insert(c);
  }
  ASSERT_GT(called.size(), 10u) << "no engine sources under " << k_root / "runtime" / "gpu";
  std::set<std::string> covered;
  for (const op_check& c : op_checks()) {
    for (const char* name : c.covers) {
      EXPECT_TRUE(declared.count(name))
          << c.op << " covers " << name << ", which no kernels/ header declares";
      covered.insert(name);
    }
  }
  for (const std::string& c : called) {
    EXPECT_TRUE(covered.count(c)) << "the engine calls " << c << " but no check-ops check covers it";
  }
  for (const std::string& c : covered) {
    EXPECT_TRUE(called.count(c)) << "check-ops covers " << c << ", which the engine does not call";
  }
}

TEST(op_checks_coverage, kernels_the_engine_does_not_call_say_why_they_are_kept) {
  const std::set<std::string> calls = engine_calls();
  for (const auto& [name, comments] : kernel_entry_points()) {
    if (calls.count(name)) continue;
    EXPECT_NE(comments.find("NOTE(kept):"), std::string::npos)
        << name << " is declared in kernels/ but the engine never calls it: remove it, or say why it is kept "
        << "(NOTE(kept): above its declaration)";
  }
}

}  // namespace
}  // namespace hart
