#include "runtime/worker_link/step_codec.h"

#include "runtime/protocol/capnp_frame.h"
#include "runtime/worker_link/worker.capnp.h"

namespace hart::worker_link {
namespace {

namespace w = ::hart::wire::worker;

constexpr protocol::capnp_frame_limits frame_limits{"worker frame", max_frame_bytes, traversal_limit_words,
                                                    nesting_limit};

void fill_ints(capnp::List<int32_t>::Builder b, const std::vector<int32_t>& v) {
  for (size_t i = 0; i < v.size(); ++i) b.set(unsigned(i), v[i]);
}

std::vector<int32_t> read_ints(capnp::List<int32_t>::Reader r) {
  std::vector<int32_t> v;
  v.reserve(r.size());
  for (int32_t x : r) v.push_back(x);
  return v;
}

void fill_summary(w::ModelSummary::Builder b, const model_summary& m) {
  b.setVocabSize(m.vocab_size);
  b.setHiddenSize(m.hidden_size);
  b.setNLayers(m.n_layers);
  b.setWindow(m.window);
  b.setPrecision(m.precision);
  b.setDeterministic(m.deterministic);
}

void fill_plan(w::StepPlan::Builder b, const sched::step_plan& p) {
  b.setStep(p.step);
  auto items = b.initItems(unsigned(p.items.size()));
  for (size_t i = 0; i < p.items.size(); ++i) {
    const sched::step_item& it = p.items[i];
    auto ib = items[unsigned(i)];
    ib.setSeqId(it.seq_id);
    ib.setRequestId(it.request_id);
    ib.setSample(it.sample);
    fill_ints(ib.initTokens(unsigned(it.tokens.size())), it.tokens);
    fill_ints(ib.initFullPages(unsigned(it.full_pages.size())), it.full_pages);
    fill_ints(ib.initSwaPages(unsigned(it.swa_pages.size())), it.swa_pages);
    ib.setNComputed(it.n_computed);
    ib.setSampleLast(it.sample_last);
    auto s = ib.initSampling();
    s.setTemperature(it.sampling.temperature);
    s.setTopK(it.sampling.top_k);
    s.setTopP(it.sampling.top_p);
    s.setMinP(it.sampling.min_p);
    s.setSeed(it.sampling.seed);
    ib.setLogprobs(it.logprobs);
    ib.setTopLogprobs(it.top_logprobs);
    ib.setCaptureRouting(it.capture_routing);
    ib.setPromptLogprobs(it.prompt_logprobs);
    ib.setNextToken(it.next_token);
    auto ds = ib.initDraftSeeds(unsigned(it.draft_seeds.size()));
    for (size_t k = 0; k < it.draft_seeds.size(); ++k) ds.set(unsigned(k), it.draft_seeds[k]);
    ib.setMtpKv(it.mtp_kv);
    ib.setMtpDrafts(it.mtp_drafts);
  }
}

void fill_layers(capnp::List<w::LayerIds>::Builder b, const std::vector<sched::layer_routing>& layers) {
  for (size_t i = 0; i < layers.size(); ++i) {
    b[unsigned(i)].setLayer(layers[i].layer);
    b[unsigned(i)].setK(layers[i].k);
    fill_ints(b[unsigned(i)].initIds(unsigned(layers[i].ids.size())), layers[i].ids);
  }
}

status_or<std::vector<sched::layer_routing>> read_layers(capnp::List<w::LayerIds>::Reader r,
                                                         int64_t positions) {
  std::vector<sched::layer_routing> out;
  for (auto lr : r) {
    if (lr.getK() < 0 || int64_t(lr.getIds().size()) != positions * lr.getK()) {
      return invalid_argument("result: routing layer %d holds %u ids, not %lld positions x %d", lr.getLayer(),
                              lr.getIds().size(), (long long)positions, lr.getK());
    }
    out.push_back({lr.getLayer(), lr.getK(), read_ints(lr.getIds())});
  }
  return out;
}

void fill_result(w::StepResult::Builder b, const sched::step_result& r) {
  b.setStep(r.step);
  b.setErrorCode(uint16_t(r.error.code()));
  b.setErrorMessage(r.error.message());
  auto l = b.initSampled(unsigned(r.sampled.size()));
  for (size_t i = 0; i < r.sampled.size(); ++i) {
    const sched::sampled_token& t = r.sampled[i];
    auto tb = l[unsigned(i)];
    tb.setSeqId(t.seq_id);
    tb.setToken(t.token);
    tb.setLogprob(t.logprob);
    auto tl = tb.initTopLogprobs(unsigned(t.top_logprobs.size()));
    for (size_t k = 0; k < t.top_logprobs.size(); ++k) {
      tl[unsigned(k)].setToken(t.top_logprobs[k].token);
      tl[unsigned(k)].setLogprob(t.top_logprobs[k].logprob);
    }
  }
  auto rl = b.initRouting(unsigned(r.routing.size()));
  for (size_t i = 0; i < r.routing.size(); ++i) {
    const sched::item_routing& ir = r.routing[i];
    rl[unsigned(i)].setSeqId(ir.seq_id);
    rl[unsigned(i)].setPositions(ir.trace.positions);
    fill_layers(rl[unsigned(i)].initExperts(unsigned(ir.trace.experts.size())), ir.trace.experts);
    fill_layers(rl[unsigned(i)].initPicks(unsigned(ir.trace.picks.size())), ir.trace.picks);
  }
  auto ll = b.initPromptLogprobs(unsigned(r.prompt_logprobs.size()));
  for (size_t i = 0; i < r.prompt_logprobs.size(); ++i) {
    ll[unsigned(i)].setSeqId(r.prompt_logprobs[i].seq_id);
    auto next = ll[unsigned(i)].initNext(unsigned(r.prompt_logprobs[i].next.size()));
    for (size_t k = 0; k < r.prompt_logprobs[i].next.size(); ++k)
      next.set(unsigned(k), r.prompt_logprobs[i].next[k]);
  }
  auto dl = b.initDrafts(unsigned(r.drafts.size()));
  for (size_t i = 0; i < r.drafts.size(); ++i) {
    dl[unsigned(i)].setSeqId(r.drafts[i].seq_id);
    fill_ints(dl[unsigned(i)].initTokens(unsigned(r.drafts[i].tokens.size())), r.drafts[i].tokens);
  }
}

sched::step_plan read_plan(w::StepPlan::Reader r) {
  sched::step_plan p;
  p.step = r.getStep();
  p.items.reserve(r.getItems().size());
  for (auto ir : r.getItems()) {
    sched::step_item it;
    it.seq_id = ir.getSeqId();
    it.request_id = ir.getRequestId();
    it.sample = ir.getSample();
    it.tokens = read_ints(ir.getTokens());
    it.full_pages = read_ints(ir.getFullPages());
    it.swa_pages = read_ints(ir.getSwaPages());
    it.n_computed = ir.getNComputed();
    it.sample_last = ir.getSampleLast();
    auto s = ir.getSampling();
    it.sampling.temperature = s.getTemperature();
    it.sampling.top_k = s.getTopK();
    it.sampling.top_p = s.getTopP();
    it.sampling.min_p = s.getMinP();
    it.sampling.seed = s.getSeed();
    it.logprobs = ir.getLogprobs();
    it.top_logprobs = ir.getTopLogprobs();
    it.capture_routing = ir.getCaptureRouting();
    it.prompt_logprobs = ir.getPromptLogprobs();
    it.next_token = ir.getNextToken();
    for (uint64_t seed : ir.getDraftSeeds()) it.draft_seeds.push_back(seed);
    it.mtp_kv = ir.getMtpKv();
    it.mtp_drafts = ir.getMtpDrafts();
    p.items.push_back(std::move(it));
  }
  return p;
}

status_or<sched::step_result> read_result(w::StepResult::Reader r) {
  sched::step_result res;
  res.step = r.getStep();
  const uint16_t code = r.getErrorCode();
  if (code > uint16_t(status_code::unimplemented))
    return invalid_argument("result: unknown error code %u", code);
  if (code != 0) {
    res.error = status(status_code(code), r.getErrorMessage().cStr());
  } else if (r.getErrorMessage().size() != 0) {
    return invalid_argument("result: error message without an error code");
  }
  res.sampled.reserve(r.getSampled().size());
  for (auto tr : r.getSampled()) {
    sched::sampled_token t;
    t.seq_id = tr.getSeqId();
    t.token = tr.getToken();
    t.logprob = tr.getLogprob();
    for (auto lp : tr.getTopLogprobs()) t.top_logprobs.push_back({lp.getToken(), lp.getLogprob()});
    res.sampled.push_back(std::move(t));
  }
  for (auto rr : r.getRouting()) {
    sched::item_routing ir;
    ir.seq_id = rr.getSeqId();
    ir.trace.positions = rr.getPositions();
    if (ir.trace.positions < 0)
      return invalid_argument("result: routing of %lld positions", (long long)ir.trace.positions);
    HART_ASSIGN_OR_RETURN(ir.trace.experts, read_layers(rr.getExperts(), ir.trace.positions));
    HART_ASSIGN_OR_RETURN(ir.trace.picks, read_layers(rr.getPicks(), ir.trace.positions));
    res.routing.push_back(std::move(ir));
  }
  for (auto lr : r.getPromptLogprobs()) {
    sched::item_logprobs lp;
    lp.seq_id = lr.getSeqId();
    for (float v : lr.getNext()) lp.next.push_back(v);
    res.prompt_logprobs.push_back(std::move(lp));
  }
  for (auto dr : r.getDrafts()) res.drafts.push_back({dr.getSeqId(), read_ints(dr.getTokens())});
  return res;
}

status check_plan(const sched::step_plan& p) {
  for (size_t i = 0; i < p.items.size(); ++i) {
    const sched::step_item& it = p.items[i];
    if (it.n_computed < 0)
      return invalid_argument("plan item %zu: n_computed %lld < 0", i, (long long)it.n_computed);
    if (it.top_logprobs < 0) return invalid_argument("plan item %zu: top_logprobs < 0", i);
    if (it.tokens.empty()) return invalid_argument("plan item %zu: no tokens", i);
    if (it.mtp_drafts < 0) return invalid_argument("plan item %zu: mtp_drafts < 0", i);
    HART_RETURN_IF_ERROR(it.sampling.validate());
  }
  return {};
}

}  // namespace

std::string model_summary::to_string() const {
  return "vocab " + std::to_string(vocab_size) + ", hidden " + std::to_string(hidden_size) + ", " +
         std::to_string(n_layers) + " layers, window " + std::to_string(window) + ", " + precision +
         (deterministic ? ", deterministic" : "");
}

status_or<std::vector<uint8_t>> encode(const worker_message& m) {
  return protocol::capnp_frame_write("worker encode", 1024, [&](capnp::MessageBuilder& mb) {
    auto root = mb.initRoot<w::WorkerMessage>();
    if (auto* h = std::get_if<worker_hello>(&m)) {
      auto b = root.initHello();
      b.setVersion(h->version);
      b.setPid(h->pid);
      fill_summary(b.initModel(), h->model);
      b.setPageSize(h->page_size);
      b.setToken(h->token);
    } else if (auto* c = std::get_if<worker_configure>(&m)) {
      auto b = root.initConfigure();
      b.setPageSize(c->page_size);
      b.setNFullPages(c->n_full_pages);
      b.setNSwaPages(c->n_swa_pages);
      b.setHeartbeatMs(c->heartbeat_ms);
    } else if (auto* hb = std::get_if<worker_heartbeat>(&m)) {
      root.initHeartbeat().setStep(hb->step);
    } else if (auto* p = std::get_if<sched::step_plan>(&m)) {
      fill_plan(root.initPlan(), *p);
    } else if (auto* r = std::get_if<sched::step_result>(&m)) {
      fill_result(root.initResult(), *r);
    } else {
      root.setBye();
    }
    return status{};
  });
}

status_or<worker_message> decode(const void* data, size_t size) {
  return protocol::capnp_frame_decode<w::WorkerMessage>(
      data, size, frame_limits, [](w::WorkerMessage::Reader root) -> status_or<worker_message> {
        switch (root.which()) {
          case w::WorkerMessage::HELLO: {
            auto h = root.getHello();
            worker_hello out;
            out.version = h.getVersion();
            out.pid = h.getPid();
            auto m = h.getModel();
            out.model.vocab_size = m.getVocabSize();
            out.model.hidden_size = m.getHiddenSize();
            out.model.n_layers = m.getNLayers();
            out.model.window = m.getWindow();
            out.model.precision = m.getPrecision().cStr();
            out.model.deterministic = m.getDeterministic();
            out.page_size = h.getPageSize();
            out.token = h.getToken().cStr();
            return worker_message{std::move(out)};
          }
          case w::WorkerMessage::CONFIGURE: {
            auto c = root.getConfigure();
            worker_configure out{c.getPageSize(), c.getNFullPages(), c.getNSwaPages(), c.getHeartbeatMs()};
            if (out.page_size <= 0 || out.n_full_pages < 0 || out.n_swa_pages < 0 || out.heartbeat_ms < 0)
              return invalid_argument(
                  "configure: bad sizes (page %lld, full %lld, swa %lld, heartbeat %lld ms)",
                  (long long)out.page_size, (long long)out.n_full_pages, (long long)out.n_swa_pages,
                  (long long)out.heartbeat_ms);
            return worker_message{out};
          }
          case w::WorkerMessage::PLAN: {
            sched::step_plan p = read_plan(root.getPlan());
            HART_RETURN_IF_ERROR(check_plan(p));
            return worker_message{std::move(p)};
          }
          case w::WorkerMessage::RESULT: {
            HART_ASSIGN_OR_RETURN(sched::step_result r, read_result(root.getResult()));
            return worker_message{std::move(r)};
          }
          case w::WorkerMessage::BYE:
            return worker_message{worker_bye{}};
          case w::WorkerMessage::HEARTBEAT:
            return worker_message{worker_heartbeat{root.getHeartbeat().getStep()}};
        }
        return invalid_argument("worker frame: unknown message kind %u", unsigned(root.which()));
      });
}

}  // namespace hart::worker_link
