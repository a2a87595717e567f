#include "runtime/pd_link/pd_codec.h"

#include "runtime/pd_link/pd.capnp.h"
#include "runtime/protocol/capnp_frame.h"
#include "runtime/protocol/sampling_wire.h"
#include "runtime/protocol/validate.h"

#include <cstring>
#include <limits>
#include <utility>

namespace hart::pd_link {
namespace {

namespace w = ::hart::wire::pd;

constexpr protocol::capnp_frame_limits frame_limits{"pd frame", max_frame_bytes, traversal_limit_words,
                                                    nesting_limit};

static_assert(unsigned(refuse_reason::aborted) == unsigned(w::RefuseReason::ABORTED),
              "refuse_reason and RefuseReason are value for value equal");

// A count for a UInt32 field; the wire cannot carry a negative or a larger one.
status to_u32(int64_t v, const char* field, uint32_t* out) {
  if (v < 0 || v > int64_t(std::numeric_limits<uint32_t>::max()))
    return invalid_argument("%s: %lld does not fit the wire's UInt32", field, (long long)v);
  *out = uint32_t(v);
  return {};
}

capnp::Data::Reader float_bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const kj::byte*>(v.data()), v.size() * sizeof(float)};
}

status fill_prefill(const prefill_request& p, w::Prefill::Builder b) {
  auto t = b.initTokens(unsigned(p.tokens.size()));
  for (size_t i = 0; i < p.tokens.size(); ++i) t.set(unsigned(i), p.tokens[i]);
  protocol::sampling_write(p.sampling, b.initSampling());
  uint32_t skip = 0;
  HART_RETURN_IF_ERROR(to_u32(p.skip_full, "prefill.skipFull", &skip));
  b.setSkipFull(skip);
  uint32_t page_size = 0;
  HART_RETURN_IF_ERROR(to_u32(p.page_size, "prefill.pageSize", &page_size));
  b.setLayout(p.layout);
  b.setPageSize(page_size);
  return {};
}

status fill_chunk(const kv_pages& kv, w::KvChunk::Builder b) {
  uint32_t page_size = 0, n_tokens = 0, first_full = 0, first_swa = 0, first_page = 0, n_pages = 0;
  HART_RETURN_IF_ERROR(to_u32(kv.page_size, "kv_chunk.pageSize", &page_size));
  HART_RETURN_IF_ERROR(to_u32(kv.n_tokens, "kv_chunk.nTokens", &n_tokens));
  HART_RETURN_IF_ERROR(to_u32(kv.first_full, "kv_chunk.firstFull", &first_full));
  HART_RETURN_IF_ERROR(to_u32(kv.first_swa, "kv_chunk.firstSwa", &first_swa));
  HART_RETURN_IF_ERROR(to_u32(kv.first_page, "kv_chunk.firstPage", &first_page));
  HART_RETURN_IF_ERROR(to_u32(kv.end_page - kv.first_page, "kv_chunk.nPages", &n_pages));
  b.setLayout(kv.layout);
  b.setPageSize(page_size);
  b.setNTokens(n_tokens);
  b.setFirstFull(first_full);
  b.setFirstSwa(first_swa);
  b.setFirstPage(first_page);
  b.setNPages(n_pages);
  b.setFullPages(float_bytes(kv.full));
  b.setSwaPages(float_bytes(kv.swa));
  return {};
}

status fill_message(const pd_message& m, w::PdMessage::Builder root) {
  root.setVersion(link_version);
  root.setRequestId(m.request_id);
  root.setTransferId(m.transfer_id);
  if (const auto* p = std::get_if<prefill_request>(&m.body)) return fill_prefill(*p, root.initPrefill());
  if (const auto* c = std::get_if<kv_chunk>(&m.body)) return fill_chunk(c->kv, root.initKvChunk());
  if (const auto* d = std::get_if<kv_done>(&m.body)) {
    auto b = root.initKvDone();
    b.setFirstToken(d->first_token);
    b.setFirstLogprob(d->first_logprob);
    b.setWeightVersion(d->weight_version);
    b.setNChunks(d->n_chunks);
    if (d->first_top_logprobs.size() > protocol::max_top_logprobs)
      return invalid_argument("kv_done.firstTopLogprobs: %zu entries, limit %u", d->first_top_logprobs.size(),
                              unsigned(protocol::max_top_logprobs));
    auto top = b.initFirstTopLogprobs(unsigned(d->first_top_logprobs.size()));
    for (size_t i = 0; i < d->first_top_logprobs.size(); ++i) {
      top[unsigned(i)].setTokenId(d->first_top_logprobs[i].token_id);
      top[unsigned(i)].setLogprob(d->first_top_logprobs[i].logprob);
    }
  } else if (const auto* r = std::get_if<kv_refuse>(&m.body)) {
    auto b = root.initKvRefuse();
    b.setReason(static_cast<w::RefuseReason>(r->reason));
    b.setMessage(kj::StringPtr(r->message.data(), r->message.size()));
  } else {
    root.setKvAck();
  }
  return {};
}

status_or<prefill_request> read_prefill(w::Prefill::Reader r) {
  prefill_request p;
  const auto tokens = r.getTokens();
  if (tokens.size() == 0 || tokens.size() > protocol::max_prompt_tokens) {
    return invalid_argument("prefill: %u tokens, expected 1..%zu", tokens.size(),
                            protocol::max_prompt_tokens);
  }
  p.tokens.reserve(tokens.size());
  for (int32_t t : tokens) {
    if (t < 0) return invalid_argument("prefill: token %d at position %zu", t, p.tokens.size());
    p.tokens.push_back(t);
  }
  HART_ASSIGN_OR_RETURN(p.sampling, protocol::sampling_read(r.getSampling()));
  HART_RETURN_IF_ERROR(protocol::validate_sampling(p.sampling));
  p.skip_full = r.getSkipFull();
  p.layout = r.getLayout();
  p.page_size = r.getPageSize();
  if (p.page_size == 0) return invalid_argument("prefill: pageSize 0");
  // A page holds at least one position, and one page must be left to send.
  if (size_t(p.skip_full) >= p.tokens.size()) {
    return invalid_argument("prefill: skipFull %lld pages of a %zu-token prompt leaves none to send",
                            (long long)p.skip_full, p.tokens.size());
  }
  return p;
}

// `bytes` as `n_pages` whole pages of floats (none when n_pages is 0).
status read_pages(capnp::Data::Reader bytes, int64_t n_pages, const char* field, std::vector<float>* out) {
  const size_t n = bytes.size();
  if (n_pages == 0 ? n != 0 : (n == 0 || n % (size_t(n_pages) * sizeof(float)) != 0))
    return invalid_argument("kv_chunk: %s of %zu bytes is not %lld whole pages of floats", field, n,
                            (long long)n_pages);
  out->resize(n / sizeof(float));
  if (n != 0) std::memcpy(out->data(), bytes.begin(), n);
  return {};
}

status_or<kv_chunk> read_chunk(w::KvChunk::Reader r) {
  kv_pages kv;
  kv.layout = r.getLayout();
  kv.page_size = r.getPageSize();
  kv.n_tokens = r.getNTokens();
  kv.first_full = r.getFirstFull();
  kv.first_swa = r.getFirstSwa();
  kv.first_page = r.getFirstPage();
  kv.end_page = kv.first_page + int64_t(r.getNPages());
  const int64_t n_pages = kv.n_pages();
  if (kv.page_size == 0 || kv.n_tokens == 0 || kv.first_full >= n_pages || kv.first_swa > n_pages ||
      kv.first_page >= kv.end_page || kv.end_page > n_pages) {
    return invalid_argument(
        "kv_chunk: pages [%lld, %lld) (full from %lld, SWA from %lld) of %lld positions in pages of %lld do "
        "not "
        "hold together",
        (long long)kv.first_page, (long long)kv.end_page, (long long)kv.first_full, (long long)kv.first_swa,
        (long long)kv.n_tokens, (long long)kv.page_size);
  }
  HART_RETURN_IF_ERROR(read_pages(r.getFullPages(), kv.n_full_carried(), "fullPages", &kv.full));
  HART_RETURN_IF_ERROR(read_pages(r.getSwaPages(), kv.n_swa_carried(), "swaPages", &kv.swa));
  return kv_chunk{std::move(kv)};
}

status_or<kv_done> read_done(w::KvDone::Reader r) {
  kv_done d{r.getFirstToken(), r.getFirstLogprob(), r.getWeightVersion(), r.getNChunks(), {}};
  if (d.first_token < 0) return invalid_argument("kv_done: first token %d", d.first_token);
  if (!(d.first_logprob <= 0.0f))  // NaN too
    return invalid_argument("kv_done: firstLogprob %g is not a log-probability", double(d.first_logprob));
  if (d.n_chunks == 0) return invalid_argument("kv_done: after no chunks");
  const auto top = r.getFirstTopLogprobs();
  if (top.size() > protocol::max_top_logprobs)
    return invalid_argument("kv_done: %u firstTopLogprobs, limit %u", top.size(),
                            unsigned(protocol::max_top_logprobs));
  for (const auto t : top) {
    if (!(t.getLogprob() <= 0.0f))
      return invalid_argument("kv_done: top log-prob %g of token %u is not a log-probability",
                              double(t.getLogprob()), t.getTokenId());
    d.first_top_logprobs.push_back({t.getTokenId(), t.getLogprob()});
  }
  return d;
}

status_or<kv_refuse> read_refuse(w::KvRefuse::Reader r) {
  const unsigned reason = unsigned(r.getReason());
  if (reason > unsigned(refuse_reason::aborted))
    return invalid_argument("kv_refuse: unknown reason %u", reason);
  const auto text = r.getMessage();
  if (text.size() > max_refuse_message_bytes)
    return invalid_argument("kv_refuse: message of %zu bytes, limit %zu", text.size(),
                            max_refuse_message_bytes);
  return kv_refuse{refuse_reason(reason), std::string(text.begin(), text.size())};
}

}  // namespace

status_or<std::vector<uint8_t>> encode(const pd_message& m) {
  // A chunk's KV fits the first segment: the frame is one segment, copied once.
  size_t first_segment_words = 1024;
  if (const auto* c = std::get_if<kv_chunk>(&m.body))
    first_segment_words += (c->kv.full.size() + c->kv.swa.size()) * sizeof(float) / sizeof(capnp::word);
  return protocol::capnp_frame_write("pd encode", first_segment_words, [&](capnp::MessageBuilder& mb) {
    return fill_message(m, mb.initRoot<w::PdMessage>());
  });
}

status_or<pd_message> decode(const void* data, size_t size) {
  return protocol::capnp_frame_decode<w::PdMessage>(
      data, size, frame_limits, [](w::PdMessage::Reader root) -> status_or<pd_message> {
        if (root.getVersion() != link_version) {
          return invalid_argument("pd frame: link version %u, this peer speaks %u", root.getVersion(),
                                  link_version);
        }
        pd_message m;
        m.request_id = root.getRequestId();
        m.transfer_id = root.getTransferId();
        if (m.request_id == 0 || m.transfer_id == 0) {
          return invalid_argument("pd frame: request id %llu, transfer id %llu (neither may be 0)",
                                  (unsigned long long)m.request_id, (unsigned long long)m.transfer_id);
        }
        switch (root.which()) {
          case w::PdMessage::PREFILL: {
            HART_ASSIGN_OR_RETURN(m.body, read_prefill(root.getPrefill()));
            return m;
          }
          case w::PdMessage::KV_CHUNK: {
            HART_ASSIGN_OR_RETURN(m.body, read_chunk(root.getKvChunk()));
            return m;
          }
          case w::PdMessage::KV_DONE: {
            HART_ASSIGN_OR_RETURN(m.body, read_done(root.getKvDone()));
            return m;
          }
          case w::PdMessage::KV_ACK:
            m.body = kv_ack{};
            return m;
          case w::PdMessage::KV_REFUSE: {
            HART_ASSIGN_OR_RETURN(m.body, read_refuse(root.getKvRefuse()));
            return m;
          }
        }
        return invalid_argument("pd frame: unknown message kind %u", unsigned(root.which()));
      });
}

}  // namespace hart::pd_link
