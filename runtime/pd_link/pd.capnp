# File: runtime/pd_link/pd.capnp
# The internal wire between a decode server and a prefill server (prefill/decode
# disaggregation, docs/pd.md). Not a public contract: both ends are the same build,
# and PdMessage.version must match exactly. One ZeroMQ message = [routing id (ROUTER
# side only)] [one PdMessage, standard unpacked framing, at most 64 MiB].
#
#   decode -> prefill: prefill (the prompt, its sampling, the full pages the decode side holds)
#   prefill -> decode: kvChunk ... (whole pages of the KV, in page order), then kvDone
#                      (the first sampled token)
#   decode -> prefill: kvAck (the prefill server may free its pages) or kvRefuse (why not;
#                      the transfer is over, the prefill server frees its pages too)
#   prefill -> decode: kvRefuse instead of the chunks when it will not prefill (the decode
#                      side's layout is not its own, or the request failed): the decode
#                      side releases the pages it reserved
#
# Every message names its request and its transfer.

@0xde21eeb1a8b4b5cb;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("hart::wire::pd");

using Hart = import "/runtime/protocol/hart.capnp";

struct Prefill {
  tokens @0 :List(Int32);           # the whole prompt
  sampling @1 :Hart.SamplingParams; # the generate's, for the first token the prefill server samples
  skipFull @2 :UInt32;              # full pages the decode side holds already (a prefix hit there)
  layout @3 :UInt64;                # kv_store::layout_id of the decode side's store: a prefill server
  pageSize @4 :UInt32;              # of another layout or page size refuses before computing anything
}

# One page range of the sequence's KV (runtime/model/kv_transfer.h kv_pages).
struct KvChunk {
  layout @0 :UInt64;      # kv_store::layout_id of the sender's store
  pageSize @1 :UInt32;    # positions per page
  nTokens @2 :UInt32;     # positions [0, nTokens) hold valid KV
  firstFull @3 :UInt32;   # the transfer carries full pages [firstFull, pages of nTokens)
  firstSwa @4 :UInt32;    # and SWA pages [firstSwa, pages of nTokens)
  firstPage @5 :UInt32;   # this chunk carries those of pages [firstPage, firstPage + nPages)
  nPages @6 :UInt32;
  fullPages @7 :Data;     # float32, page by page, from max(firstPage, firstFull)
  swaPages @8 :Data;      # float32, page by page, from max(firstPage, firstSwa)
}

struct KvDone {
  firstToken @0 :Int32;     # sampled from the prompt's last logits
  firstLogprob @1 :Float32; # its log-probability under the sampled distribution
  weightVersion @2 :UInt64; # the weights that computed the KV and the token
  nChunks @3 :UInt32;       # kvChunk messages of this transfer sent before this one
  firstTopLogprobs @4 :List(Hart.TokenLogprob);  # the prefill's sampling.topLogprobs most likely
                                                 # first tokens, most likely first (RL rollouts)
}

enum RefuseReason {
  layoutMismatch @0;   # the other side's pages are laid out for another model or page size
  badChunk @1;         # a chunk's header or sizes do not hold together, or pages are missing
  unknownTransfer @2;  # no transfer of that id is expected
  aborted @3;          # the request ended on the decode side
}

struct KvRefuse {
  reason @0 :RefuseReason;
  message @1 :Text;
}

struct PdMessage {
  version @0 :UInt32;
  requestId @1 :UInt64;    # != 0
  transferId @2 :UInt64;   # != 0, chosen by the decode side
  union {
    prefill @3 :Prefill;
    kvChunk @4 :KvChunk;
    kvDone @5 :KvDone;
    kvAck @6 :Void;
    kvRefuse @7 :KvRefuse;
  }
}
