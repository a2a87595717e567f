# File: runtime/weight_sync/weight_sync.capnp
# The public weight-sync wire (docs/protocol.md §8 explains it in prose): a trainer pushes a
# full set of named tensors into a running `hart serve --weight-sync-endpoint EP`, which
# re-quantizes them and swaps them in between engine steps as one new weight version.
#
# One ZeroMQ message = [routing id (ROUTER side only)] [header: u8 version = 1, u8 kind]
# [one Cap'n Proto message, standard unpacked framing] [raw data frames (bucket only)].
# kind 3: client -> server, root SyncRequest; kind 4: server -> client, root SyncReply.
# Tensor bytes never travel inside Cap'n Proto: a Bucket lists its chunks and is followed by
# exactly one raw frame per chunk, in list order, each `length` bytes.
#
# Same evolution rules as hart.capnp: fields appended with new ordinals, never renumbered.

@0xd6fd73dc5103cf2e;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("hart::wire::sync");

enum DType {
  bf16 @0;
  f16 @1;
  f32 @2;
  i32 @3;    # integer tables only (hash-routing tid2eid)
  i64 @4;
}

# Opens an update. A begin while another update is staged discards that one.
struct Begin {
  version @0 :UInt64;      # must be above the serving version
  tensorCount @1 :UInt64;  # tensors the update will carry, >= 1
  totalBytes @2 :UInt64;   # sum of every tensor's bytes (numel x dtype size)
  # Chunks marked `nccl` come by NCCL broadcast: the trainer (rank 0, on another GPU of this host
  # or another host) and the server (rank 1) form a 2-rank communicator from this id (128 bytes of
  # ncclGetUniqueId). The server keeps it after a successful update: a later Begin with the same
  # id and ncclReuse set broadcasts through it again without forming it anew.
  ncclUniqueId @3 :Data;
  ncclReuse @4 :Bool;      # the group of ncclUniqueId is open from an earlier update (notFound if not)
}

# One piece of one tensor; every chunk repeats name, dtype and shape. A tensor's chunks may
# arrive in any order (a client may send buckets over several connections) but must not
# overlap, and together must cover the tensor.
struct Chunk {
  name @0 :Text;           # official or Hugging Face spelling (README: Checkpoints)
  dtype @1 :DType;
  shape @2 :List(Int64);   # outermost first, as safetensors
  byteOffset @3 :UInt64;   # where this chunk's bytes start inside the tensor
  length @4 :UInt64;       # bytes in this chunk's data frame (> 0)
  # A trainer on the server's host may leave a chunk in CUDA memory instead of a data frame:
  # ipcHandle (64 bytes: the cudaIpcMemHandle_t of its allocation) and ipcOffset (the chunk's
  # first byte inside it). No data frame follows such a chunk, and it is outside crc32c (its
  # bytes cross no transport). The allocation must stay valid until End is answered.
  ipcHandle @5 :Data;
  ipcOffset @6 :UInt64;
  # Set in an update whose Begin carried ncclUniqueId: the chunk's bytes are one ncclBroadcast of
  # `length` bytes from rank 0, issued right after the bucket was sent, in list order, buckets in
  # seq order on one connection (both ranks must call NCCL in the same order). No data frame, and
  # outside crc32c like IPC chunks.
  nccl @7 :Bool;
}

struct Bucket {
  version @0 :UInt64;
  seq @1 :UInt64;          # 0, 1, 2, ... per update; each once, in any order across connections
                           # (in seq order on one connection for an update by NCCL)
  chunks @2 :List(Chunk);  # 1..65536; one data frame each follows this message (in list order),
                           # except for chunks in CUDA memory (ipcHandle or nccl set)
}

# Closes the update: the server checks counts, sizes and the checksum, builds the weights
# and swaps them in; the reply comes after the swap (or the error). With bucketCount set, an
# End that arrives before some of its buckets (sent on other connections) waits for them.
struct End {
  version @0 :UInt64;
  crc32c @1 :UInt32;       # CRC-32C (Castagnoli) over every data frame, concatenated in bucket
                           # seq order (frames in list order): send order on one connection
  bucketCount @2 :UInt64;  # buckets sent (seqs 0..n-1); 0 = not stated: all came before End
}

# Drops a staged update (the client gives up).
struct Abort {
  version @0 :UInt64;
}

struct SyncRequest {
  union {
    begin @0 :Begin;
    bucket @1 :Bucket;
    end @2 :End;
    abort @3 :Abort;
  }
}

enum Phase {
  begin @0;
  bucket @1;
  end @2;
  abort @3;
  frame @4;                # a message that did not decode (no phase known)
}

# Same values as hart.capnp ErrorCode.
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

# The answer to begin, end and abort (ack or error), and to a bucket only when it fails.
struct SyncReply {
  version @0 :UInt64;          # the update this answers (0 when unknown)
  phase @1 :Phase;
  seq @2 :UInt64;              # the bucket's seq (phase bucket)
  code @3 :ErrorCode;          # ok = ack
  message @4 :Text;            # for errors: what and where
  servingVersion @5 :UInt64;   # the weight version serving after this message
  bytesReceived @6 :UInt64;    # end: tensor bytes staged for this update
  buildUs @7 :UInt64;          # end: re-quantizing/building the weights
  swapUs @8 :UInt64;           # end: waiting for the step boundary and swapping
}
