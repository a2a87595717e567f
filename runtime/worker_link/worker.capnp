# File: runtime/worker_link/worker.capnp
# The internal wire between `hart serve` (scheduler side, a ZeroMQ ROUTER) and a
# `hart worker` process (a DEALER). Not a public contract: both ends are the same
# build, and Hello.version must match exactly. One ZeroMQ message = [routing id
# (ROUTER side only)] [one WorkerMessage, standard unpacked framing].
#
#   worker -> server: hello (on connect, and again as a heartbeat between steps)
#   server -> worker: configure (page size and pool sizes for its kv_store)
#   server -> worker: plan;  worker -> server: result (same step number)
#   worker -> server: heartbeat (the step in progress) every configure.heartbeatMs
#                     while a step runs, so a frozen worker is told from a slow step
#   either way:       bye (the sender is going away)

@0xd143cd7dee2b6aba;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("hart::wire::worker");

struct Sampling {
  temperature @0 :Float32;
  topK @1 :Int64;
  topP @2 :Float32;
  minP @3 :Float32;
  seed @4 :UInt64;
}

struct StepItem {
  seqId @0 :UInt64;
  requestId @1 :UInt64;
  sample @2 :Int32;
  tokens @3 :List(Int32);
  fullPages @4 :List(Int32);
  swaPages @5 :List(Int32);
  nComputed @6 :Int64;
  sampleLast @7 :Bool;
  sampling @8 :Sampling;
  logprobs @9 :Bool;
  topLogprobs @10 :Int32;
  captureRouting @11 :Bool;
  promptLogprobs @12 :Bool;
  nextToken @13 :Int32 = -1;  # the token after the item's last position (prompt log-probs); -1: none
  draftSeeds @14 :List(UInt64);  # a verify pass: the last draftSeeds.size() tokens are drafts (step.h)
  mtpKv @15 :Bool;               # write the MTP block's window KV of the kept positions
  mtpDrafts @16 :Int32;          # then draft this many tokens with it (step_result drafts)
}

struct StepPlan {
  step @0 :UInt64;
  items @1 :List(StepItem);
}

struct TokenLogprob {
  token @0 :Int32;
  logprob @1 :Float32;
}

struct SampledToken {
  seqId @0 :UInt64;
  token @1 :Int32;
  logprob @2 :Float32;
  topLogprobs @3 :List(TokenLogprob);
}

struct LayerIds {
  layer @0 :Int32;
  k @1 :Int32;
  ids @2 :List(Int32);    # positions x k
}

# The routing of one item that asked for it (sched::item_routing).
struct ItemRouting {
  seqId @0 :UInt64;
  positions @1 :Int64;
  experts @2 :List(LayerIds);
  picks @3 :List(LayerIds);
}

# The prompt log-probs of one item that asked for them (sched::item_logprobs): one per fed token.
struct ItemLogprobs {
  seqId @0 :UInt64;
  next @1 :List(Float32);
}

# The next step's drafts of one item (sched::item_drafts).
struct ItemDrafts {
  seqId @0 :UInt64;
  tokens @1 :List(Int32);
}

struct StepResult {
  step @0 :UInt64;
  errorCode @1 :UInt16;   # hart::status_code; 0 = ok
  errorMessage @2 :Text;
  sampled @3 :List(SampledToken);
  routing @4 :List(ItemRouting);
  promptLogprobs @5 :List(ItemLogprobs);
  drafts @6 :List(ItemDrafts);
}

# What a worker serves: the server refuses a worker whose model differs from its own.
struct ModelSummary {
  vocabSize @0 :Int64;
  hiddenSize @1 :Int64;
  nLayers @2 :Int64;
  window @3 :Int64;
  precision @4 :Text;     # exact | fp8
  deterministic @5 :Bool;
}

struct Hello {
  version @0 :UInt32;
  pid @1 :Int64;
  model @2 :ModelSummary;
  pageSize @3 :Int64;     # the worker's current page size; 0 before configure
  token @4 :Text;         # the secret its server gave it at spawn (HART_WORKER_TOKEN); empty if none
}

struct Configure {
  pageSize @0 :Int64;
  nFullPages @1 :Int64;
  nSwaPages @2 :Int64;
  heartbeatMs @3 :Int64;  # 0: no heartbeats
}

struct Heartbeat {
  step @0 :UInt64;
}

struct WorkerMessage {
  union {
    hello @0 :Hello;
    configure @1 :Configure;
    plan @2 :StepPlan;
    result @3 :StepResult;
    bye @4 :Void;
    heartbeat @5 :Heartbeat;
  }
}
