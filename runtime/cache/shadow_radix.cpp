#include "runtime/cache/shadow_radix.h"

#include "runtime/cache/shadow_radix_impl.h"
#include "runtime/core/check.h"

#include <algorithm>

namespace hart::cache {

status cache_config::validate() const {
  if (page_size <= 0 || page_size % 128 != 0) {
    return invalid_argument("cache_config: page_size=%lld must be a positive multiple of 128",
                            static_cast<long long>(page_size));
  }
  if (window <= 0) {
    return invalid_argument("cache_config: window=%lld must be positive", static_cast<long long>(window));
  }
  if (n_full_pages < 1) {
    return invalid_argument("cache_config: n_full_pages=%lld, need at least 1",
                            static_cast<long long>(n_full_pages));
  }
  const int64_t min_swa = min_swa_pages();
  if (n_swa_pages < min_swa) {
    return invalid_argument(
        "cache_config: n_swa_pages=%lld < %lld, the SWA pages one sequence holds while decoding "
        "(window %lld + one page of margin + the page being written, page_size %lld)",
        static_cast<long long>(n_swa_pages), static_cast<long long>(min_swa), static_cast<long long>(window),
        static_cast<long long>(page_size));
  }
  return status::ok_status();
}

int64_t cache_config::min_swa_pages() const {
  return (window + page_size - 1) / page_size + 2;
}

int64_t cache_config::first_live_swa_page(int64_t n_computed) const {
  const int64_t x = n_computed - window - page_size;
  return x <= 0 ? 0 : x / page_size;
}

cache_state::cache_state(const cache_config& c)
    : cfg(c), full(c.n_full_pages), swa(c.n_swa_pages), tree(c.page_size, c.window, full, swa) {}

int64_t cache_state::first_swa_page(int64_t n_computed) const {
  return cfg.first_live_swa_page(n_computed);
}

request_state* cache_state::find(request_id r) {
  auto it = requests.find(r);
  return it == requests.end() ? nullptr : &it->second;
}

const request_state* cache_state::find(request_id r) const {
  auto it = requests.find(r);
  return it == requests.end() ? nullptr : &it->second;
}

void cache_state::release(request_state& r) {
  tree.unlock(r.chain_end, r.lock_swa_start);
  for (page_id p : r.pages.full) full.unref(p, page_release::transient);
  for (page_id p : r.pages.swa) {
    if (p != no_page) swa.unref(p, page_release::transient);
  }
}

// -- lifecycle -------------------------------------------------------------------

shadow_radix::shadow_radix(const cache_config& cfg) {
  const status s = cfg.validate();
  HART_CHECK(s.ok()) << "shadow_radix: validate the config first: " << s.to_string();
  impl_ = new impl(cfg);
}

shadow_radix::~shadow_radix() {
  delete impl_;
}

const cache_config& shadow_radix::config() const {
  return impl_->cfg;
}

status_or<request_id> shadow_radix::admit(const std::vector<int32_t>& prompt, bool match_prefix) {
  if (prompt.empty()) return invalid_argument("admit: empty prompt");
  impl& m = *impl_;
  const int64_t P = m.cfg.page_size;
  const request_id id = m.next_id++;
  request_state& r = m.requests[id];
  r.tokens = prompt;
  r.chain_end = m.tree.root();
  if (m.cfg.enable_prefix_cache && match_prefix) {
    // At least one position is computed, so the last logits exist.
    const int64_t limit = (static_cast<int64_t>(prompt.size()) - 1) / P * P;
    const tree_match hit = m.tree.match(prompt, limit);
    r.chain_end = hit.node;
    r.n_tree = hit.n_tokens;
    const int64_t n_pages = hit.n_tokens / P;
    r.pages.full.assign(static_cast<size_t>(n_pages), no_page);
    r.pages.swa.assign(static_cast<size_t>(n_pages), no_page);
    const int64_t first_swa = m.first_swa_page(hit.n_tokens);
    for (radix_node* n = hit.node; n != m.tree.root(); n = n->parent) {
      const int64_t j0 = n->start / P;
      for (int64_t i = 0; i < n->n_pages(); ++i) {
        r.pages.full[j0 + i] = n->full[i];
        m.full.ref(n->full[i]);
        if (j0 + i >= first_swa && !n->tombstoned()) {
          r.pages.swa[j0 + i] = n->swa[i];
          m.swa.ref(n->swa[i]);
        }
      }
    }
    r.pages.n_cached = r.pages.n_computed = r.pages.n_reserved = hit.n_tokens;
    r.lock_swa_start = m.tree.window_lock_start(r.n_tree);
    m.tree.lock(r.chain_end, r.lock_swa_start);
  }
  ++m.n_requests;
  m.n_prompt_tokens += static_cast<int64_t>(prompt.size());
  m.n_cached_tokens += r.pages.n_cached;
  return id;
}

status shadow_radix::reserve(request_id id, int64_t n_tokens) {
  impl& m = *impl_;
  request_state* r = m.find(id);
  if (!r) return not_found("reserve: no request %lld", static_cast<long long>(id));
  const int64_t P = m.cfg.page_size;
  const int64_t need = (n_tokens + P - 1) / P - static_cast<int64_t>(r->pages.full.size());
  if (need <= 0) return status::ok_status();
  // All-or-nothing: decide before evicting anything.
  const int64_t full_short = need - m.full.n_free();
  const int64_t swa_short = need - m.swa.n_free();
  const int64_t full_evictable = full_short > 0 ? m.tree.n_evictable_full() : 0;
  const int64_t swa_evictable = swa_short > 0 ? m.tree.n_evictable_swa() : 0;
  if (full_short > full_evictable || swa_short > swa_evictable) {
    return resource_exhausted(
        "out of KV memory: request %lld needs %lld more pages of %lld tokens; full pool: %lld free "
        "+ %lld evictable of %lld; SWA pool: %lld free + %lld evictable of %lld",
        static_cast<long long>(id), static_cast<long long>(need), static_cast<long long>(P),
        static_cast<long long>(m.full.n_free()), static_cast<long long>(full_evictable),
        static_cast<long long>(m.full.capacity()), static_cast<long long>(m.swa.n_free()),
        static_cast<long long>(swa_evictable), static_cast<long long>(m.swa.capacity()));
  }
  if (full_short > 0) m.tree.evict_full(full_short);
  if (need > m.swa.n_free()) m.tree.evict_swa(need - m.swa.n_free());
  for (int64_t i = 0; i < need; ++i) {
    const page_id f = m.full.alloc();
    const page_id s = m.swa.alloc();
    HART_CHECK(f != no_page && s != no_page) << "eviction freed less than it promised";
    r->pages.full.push_back(f);
    r->pages.swa.push_back(s);
  }
  r->pages.n_reserved = static_cast<int64_t>(r->pages.full.size()) * P;
  return status::ok_status();
}

status shadow_radix::advance(request_id id, const std::vector<int32_t>& tokens) {
  impl& m = *impl_;
  request_state* r = m.find(id);
  if (!r) return not_found("advance: no request %lld", static_cast<long long>(id));
  const int64_t n = static_cast<int64_t>(tokens.size());
  const request_pages& pg = r->pages;
  if (n < pg.n_computed) {
    return invalid_argument("advance: %lld tokens < n_computed=%lld", static_cast<long long>(n),
                            static_cast<long long>(pg.n_computed));
  }
  if (n > pg.n_reserved) {
    return failed_precondition("advance: %lld tokens > n_reserved=%lld; reserve() first",
                               static_cast<long long>(n), static_cast<long long>(pg.n_reserved));
  }
  // Each newly computed position is compared once against what the request
  // said earlier (its prompt); later positions are appended.
  const int64_t known = static_cast<int64_t>(r->tokens.size());
  for (int64_t p = pg.n_computed; p < std::min(n, known); ++p) {
    if (tokens[p] != r->tokens[p]) {
      return invalid_argument("advance: token %lld at position %lld differs from the prompt's %lld",
                              static_cast<long long>(tokens[p]), static_cast<long long>(p),
                              static_cast<long long>(r->tokens[p]));
    }
  }
  const std::vector<int32_t> appended =
      n > known ? std::vector<int32_t>(tokens.begin() + known, tokens.end()) : std::vector<int32_t>{};
  return advance_to(id, appended, n);
}

status shadow_radix::advance_to(request_id id, const std::vector<int32_t>& appended, int64_t n) {
  impl& m = *impl_;
  request_state* r = m.find(id);
  if (!r) return not_found("advance: no request %lld", static_cast<long long>(id));
  const int64_t P = m.cfg.page_size;
  request_pages& pg = r->pages;
  if (n < pg.n_computed) {
    return invalid_argument("advance: %lld tokens < n_computed=%lld", static_cast<long long>(n),
                            static_cast<long long>(pg.n_computed));
  }
  if (n > pg.n_reserved) {
    return failed_precondition("advance: %lld tokens > n_reserved=%lld; reserve() first",
                               static_cast<long long>(n), static_cast<long long>(pg.n_reserved));
  }
  if (n > static_cast<int64_t>(r->tokens.size() + appended.size())) {
    return invalid_argument("advance: n_computed=%lld beyond the %zu tokens known", static_cast<long long>(n),
                            r->tokens.size() + appended.size());
  }
  r->tokens.insert(r->tokens.end(), appended.begin(), appended.end());
  pg.n_computed = n;

  // Insert first, so pages about to leave the request's window stay cached.
  if (m.cfg.enable_prefix_cache && n / P * P > r->n_tree) {
    radix_node* end = m.tree.insert(r->chain_end, r->tokens, pg.full, pg.swa, n / P);
    const int64_t n_tree = end->end(P);
    const int64_t swa_start = m.tree.window_lock_start(n_tree);
    m.tree.lock(end, swa_start);
    m.tree.unlock(r->chain_end, r->lock_swa_start);
    r->chain_end = end;
    r->n_tree = n_tree;
    r->lock_swa_start = swa_start;
  }
  const int64_t first_swa = std::min(m.first_swa_page(n), static_cast<int64_t>(pg.swa.size()));
  for (int64_t j = 0; j < first_swa; ++j) {
    if (pg.swa[j] == no_page) continue;
    m.n_window_freed_swa += m.swa.unref(pg.swa[j], page_release::transient);
    pg.swa[j] = no_page;
  }
  return status::ok_status();
}

status shadow_radix::finish(request_id id, const std::vector<int32_t>& tokens) {
  HART_RETURN_IF_ERROR(advance(id, tokens));
  return abort(id);
}

status shadow_radix::finish_at(request_id id, int64_t n_computed) {
  HART_RETURN_IF_ERROR(advance_to(id, {}, n_computed));
  return abort(id);
}

status shadow_radix::abort(request_id id) {
  impl& m = *impl_;
  request_state* r = m.find(id);
  if (!r) return not_found("abort: no request %lld", static_cast<long long>(id));
  m.release(*r);
  m.requests.erase(id);
  return status::ok_status();
}

const request_pages& shadow_radix::pages(request_id id) const {
  const request_state* r = impl_->find(id);
  HART_CHECK(r != nullptr) << "pages: no request " << id;
  return r->pages;
}

const std::vector<int32_t>& shadow_radix::tokens(request_id id) const {
  const request_state* r = impl_->find(id);
  HART_CHECK(r != nullptr) << "tokens: no request " << id;
  return r->tokens;
}

int64_t shadow_radix::evict_full(int64_t n) {
  return impl_->tree.evict_full(n);
}
int64_t shadow_radix::evict_swa(int64_t n) {
  return impl_->tree.evict_swa(n);
}

void shadow_radix::flush() {
  impl_->tree.evict_full(INT64_MAX);
  impl_->tree.evict_swa(INT64_MAX);
}

}  // namespace hart::cache
