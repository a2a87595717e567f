#include "runtime/worker/local_executor.h"

namespace hart::sched {

status_or<std::unique_ptr<local_executor>> local_executor::create(const engine& eng,
                                                                  const cache::cache_config& cfg) {
  std::unique_ptr<local_executor> ex(new local_executor());
  HART_ASSIGN_OR_RETURN(ex->store_, eng.make_store(cfg.page_size));
  ex->store_->ensure_full_pages(cfg.n_full_pages);
  ex->store_->ensure_swa_pages(cfg.n_swa_pages);
  ex->worker_ = std::make_unique<cpu_worker>(eng, *ex->store_);
  return ex;
}

}  // namespace hart::sched
