#include "runtime/core/check.h"

#include <cstdio>
#include <cstdlib>

namespace hart::detail {

check_failure::~check_failure() {
  std::fprintf(stderr, "%s:%d: %s: check failed: %s %s\n", file_, line_, func_, cond_, msg_.str().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace hart::detail
