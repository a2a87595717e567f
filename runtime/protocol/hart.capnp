# File: runtime/protocol/hart.capnp
# The public wire contract of hart's message API (docs/protocol.md explains it in prose).
#
# One ZeroMQ message = [routing id (ROUTER side only)] [header: u8 version, u8 kind] [payload].
# The payload is one single-segment-or-more Cap'n Proto message (standard framing, unpacked):
# a `Request` root when kind = 1, a `Reply` root when kind = 2.
#
# Evolution rules: add fields only at the end with new ordinals, never renumber or retype,
# never reuse an ordinal. Enum values are appended only. A change a v1 peer cannot ignore
# bumps the header version byte instead.

@0xb7b8e38a37915cad;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("hart::wire");

# ---------------------------------------------------------------- requests (client -> server)

struct ChatMessage {
  role @0 :Text;       # system | developer | user | assistant | tool
  content @1 :Text;    # UTF-8
  reasoning @2 :Text;  # an assistant turn's thinking (reasoning_content); kept where DeepSeek-V4 keeps it
}

enum ReasoningEffort {
  standard @0;  # the model's default
  high @1;      # renders as standard (DeepSeek-V4's encoding)
  max @2;       # thinking mode: DeepSeek-V4's "max" instruction before the first message
}

struct SamplingParams {
  temperature @0 :Float32 = 1.0;   # >= 0; 0 = greedy
  topP @1 :Float32 = 1.0;          # (0, 1]
  topK @2 :Int32 = -1;             # -1 = off, else >= 1
  minP @3 :Float32 = 0.0;          # [0, 1]
  seed @4 :UInt64;                 # used only when hasSeed; sample i uses seed + i
  hasSeed @5 :Bool = false;
  maxNewTokens @6 :UInt32 = 256;   # >= 1
  minNewTokens @7 :UInt32 = 0;     # <= maxNewTokens
  stop @8 :List(Text);             # stop strings; the returned text excludes the match
  stopTokenIds @9 :List(UInt32);
  ignoreEos @10 :Bool = false;
  n @11 :UInt32 = 1;               # samples sharing the prompt, >= 1
  logprobs @12 :Bool = false;      # return the log-prob of each sampled token
  topLogprobs @13 :UInt8 = 0;      # and of the k most likely tokens (0..20)
}

struct GenerateRequest {
  requestId @0 :UInt64;            # client-chosen, unique per client, != 0
  prompt :union {
    tokenIds @1 :List(UInt32);     # token-in (RL): no template applied
    messages @2 :List(ChatMessage);# chat template applied by the server
    text @3 :Text;                 # raw text, tokenized as is
  }
  sampling @4 :SamplingParams;
  sessionId @5 :Text;              # optional (empty = none): prefix reuse across turns
  priority @6 :Int32 = 0;          # larger = sooner
  returnRouting @7 :Bool = false;  # Final.routing for replay; the prompt is then computed, not cached
  returnIndexerPicks @8 :Bool = false;  # with returnRouting: also the indexer's top-k (index_topk ids per CSA layer and position)
  thinking @9 :Bool = false;       # messages: DeepSeek-V4 thinking mode ("<think>"), else chat mode ("</think>")
  reasoningEffort @10 :ReasoningEffort;  # messages, thinking mode
  logprobStartLen @11 :Int64 = -1; # >= 0: Final.inputLogprobs from this prompt position (SGLang's
                                   # logprob_start_len; the prompt is then computed, not cached);
                                   # with sampling.maxNewTokens 0 the prompt is only scored
}

enum PauseMode {
  abort @0;     # abort in-flight requests (they end with finish reason abort)
  retract @1;   # move in-flight requests back to the queue; resumed later
  inPlace @2;   # freeze in-flight requests where they are
}

struct AbortRequest {
  union {
    requestId @0 :UInt64;          # abort one generation of this client
    all @1 :Void;                  # abort every generation of this client
  }
}

struct PauseRequest {
  mode @0 :PauseMode;
}

struct Request {
  tag @0 :UInt64;                  # client correlation id, echoed in replies to control verbs
  union {
    generate @1 :GenerateRequest;
    abort @2 :AbortRequest;
    pause @3 :PauseRequest;
    resume @4 :Void;
    flushCache @5 :Void;
    health @6 :Void;
    stats @7 :Void;
    weightVersion @8 :Void;
  }
}

# ---------------------------------------------------------------- replies (server -> client)

struct TokenLogprob {
  tokenId @0 :UInt32;
  logprob @1 :Float32;             # natural log, of the distribution actually sampled
}

struct Chunk {
  requestId @0 :UInt64;
  sampleIndex @1 :UInt32;          # 0 .. n-1
  seq @2 :UInt32;                  # 0, 1, 2, ... per (requestId, sampleIndex); gaps = loss
  tokenIds @3 :List(UInt32);
  text @4 :Text;                   # UTF-8-safe delta: never ends inside a code point
  logprobs @5 :List(Float32);      # empty, or one per token id
  topLogprobs @6 :List(List(TokenLogprob));  # empty, or one list per token id
  weightVersion @7 :UInt64;        # weights that produced these tokens
  serverTimeUs @8 :UInt64;         # server CLOCK_MONOTONIC µs when the step producing them ended (0: unknown)
}

enum FinishReason {
  stop @0;      # EOS, a stop string or a stop token id
  length @1;    # maxNewTokens (or the context limit) reached
  abort @2;     # aborted by the client or by pause(abort)
  error @3;     # failed; see Final.errorMessage
}

struct Usage {
  promptTokens @0 :UInt32;
  completionTokens @1 :UInt32;
  cachedTokens @2 :UInt32;         # prompt tokens served from the prefix cache
}

struct Timings {
  queueUs @0 :UInt64;              # arrival -> first scheduled
  ttftUs @1 :UInt64;               # arrival -> first token sent
  totalUs @2 :UInt64;              # arrival -> final sent
}

struct Final {
  requestId @0 :UInt64;
  sampleIndex @1 :UInt32;
  finishReason @2 :FinishReason;
  usage @3 :Usage;
  timings @4 :Timings;
  weightVersion @5 :UInt64;        # weights at the end of the sample
  errorMessage @6 :Text;           # set when finishReason = error
  routing @7 :Routing;             # when requested (GenerateRequest.returnRouting) and it fits one message
  routingParts @8 :UInt32;         # else: the routing came in this many RoutingPart replies, just before
  inputLogprobs @9 :List(Float32); # GenerateRequest.logprobStartLen >= 0: the log-prob of each prompt
                                   # token from it under the model (NaN for position 0, which nothing predicts)
}

# A slice of a sample's routing too large for its Final: positions
# [firstPosition, firstPosition + routing.positions), every layer's ids for
# those positions. The parts of a sample arrive in position order, each
# before its Final (whose routingParts counts them).
struct RoutingPart {
  requestId @0 :UInt64;
  sampleIndex @1 :UInt32;
  firstPosition @2 :UInt32;
  routing @3 :Routing;
}

# The sparse decisions the model made for one sample, for replay in training:
# at every position it computed (the prompt and every generated token but the
# last, which was never fed), per MoE layer the routed experts and per CSA
# layer the indexer's top-k compressed entries (-1 = none). Position-major.
struct Routing {
  positions @0 :UInt32;
  experts @1 :List(LayerRouting);  # one per MoE layer (all layers), by layer
  picks @2 :List(LayerRouting);    # one per CSA layer, by layer
}

struct LayerRouting {
  layer @0 :UInt32;
  k @1 :UInt32;                    # ids per position
  ids @2 :List(Int32);             # positions x k
}

# Mirrors hart::status_code (runtime/core/status.h) value for value.
enum ErrorCode {
  ok @0;
  invalidArgument @1;
  outOfRange @2;
  notFound @3;
  resourceExhausted @4;
  failedPrecondition @5;
  unavailable @6;
  internal @7;
  cancelled @8;
  dataLoss @9;
  unimplemented @10;
}

struct Error {
  requestId @0 :UInt64;            # the generation it concerns, or 0
  code @1 :ErrorCode;
  message @2 :Text;
}

enum Verb {
  abort @0;
  pause @1;
  resume @2;
  flushCache @3;
}

struct Ack {
  verb @0 :Verb;
  affected @1 :UInt32;             # e.g. generations aborted; 0 when meaningless
}

struct Health {
  ok @0 :Bool;
  uptimeUs @1 :UInt64;
}

struct Stat {
  name @0 :Text;
  value @1 :Float64;
}

struct Histogram {
  name @0 :Text;
  upperBounds @1 :List(Float64);   # seconds, ascending; a +Inf bucket follows
  counts @2 :List(UInt64);         # per bucket (not cumulative), the +Inf bucket last
  sum @3 :Float64;
  count @4 :UInt64;
}

struct Stats {
  entries @0 :List(Stat);
  prometheus @1 :Text;             # Prometheus text exposition format
  histograms @2 :List(Histogram);  # latencies since start (docs/protocol.md)
}

struct WeightVersion {
  version @0 :UInt64;
}

struct Reply {
  tag @0 :UInt64;                  # the Request.tag this answers (0 for generation events)
  union {
    chunk @1 :Chunk;
    final @2 :Final;
    error @3 :Error;
    ack @4 :Ack;
    health @5 :Health;
    stats @6 :Stats;
    weightVersion @7 :WeightVersion;
    routingPart @8 :RoutingPart;
  }
}
