#include "runtime/http/exchange.h"

#include <gtest/gtest.h>

#include <vector>

namespace hart::http {
namespace {

using namespace std::chrono_literals;

// An exchange whose gateway is this test: it keeps what was submitted and the reply queue.
struct fake_gateway {
  std::vector<protocol::request> got;
  std::shared_ptr<reply_queue> replies;
  submit_fn submit() {
    return [this](const std::string&, protocol::request r, std::shared_ptr<reply_queue> q) {
      got.push_back(std::move(r));
      replies = std::move(q);
    };
  }
};

protocol::final_event aborted(uint32_t sample) {
  protocol::final_event f;
  f.request_id = k_exchange_request_id;
  f.sample_index = sample;
  f.reason = protocol::finish_reason::abort;
  return f;
}

std::string message_of_next(exchange& ex) {
  std::optional<protocol::reply> r = ex.next(1000ms);
  return r && std::holds_alternative<protocol::final_event>(*r)
             ? std::get<protocol::final_event>(*r).error_message
             : "(no final)";
}

TEST(exchange, an_aborts_final_says_who_aborted_it) {
  fake_gateway gw;
  exchange ex(gw.submit(), "c");
  ex.submit(protocol::generate_request{});
  ex.name_abort("aborted by pause_generation");  // the scheduler aborts it, not this exchange
  ex.name_abort("aborted by a later pause");     // a name set stays
  gw.replies->push(aborted(0));
  EXPECT_EQ(message_of_next(ex), "aborted by pause_generation");
  ASSERT_EQ(gw.got.size(), 1u) << "naming sends nothing";

  ex.abort("aborted by abort_request");  // its own abort is what happened, whatever was named
  ASSERT_EQ(gw.got.size(), 2u);
  EXPECT_EQ(std::get<protocol::control_request>(gw.got[1]).verb, protocol::control_verb::abort);
  ex.abort("again");  // idempotent: no second abort, the first reason stays
  ex.name_abort("aborted by pause_generation");
  EXPECT_EQ(gw.got.size(), 2u);
  gw.replies->push(aborted(1));
  EXPECT_EQ(message_of_next(ex), "aborted by abort_request");

  protocol::final_event with_message = aborted(2);
  with_message.error_message = "deadline exceeded";  // a message of its own stays
  gw.replies->push(with_message);
  EXPECT_EQ(message_of_next(ex), "deadline exceeded");
}

TEST(exchange, an_abort_no_one_named_gets_sglangs_default_message) {
  fake_gateway gw;
  exchange ex(gw.submit(), "c");
  ex.submit(protocol::generate_request{});
  gw.replies->push(aborted(0));
  EXPECT_EQ(message_of_next(ex), k_abort_unexplained);
  protocol::final_event length = aborted(1);
  length.reason = protocol::finish_reason::length;
  gw.replies->push(length);
  EXPECT_EQ(message_of_next(ex), "") << "only aborts get a message";
}

}  // namespace
}  // namespace hart::http
