#include "runtime/weight_sync/sync_codec.h"

#include "runtime/core/status_testing.h"
#include "runtime/weight_sync/weight_sync.capnp.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

namespace hart::weight_sync {
namespace {

frame_view view(const std::vector<uint8_t>& v) {
  return {v.data(), v.size()};
}
frame_view view(const std::array<uint8_t, 2>& v) {
  return {v.data(), v.size()};
}

// A SyncRequest built field by field: what encode_request refuses to write.
std::vector<uint8_t> raw_request(const std::function<void(wire::sync::SyncRequest::Builder)>& fill) {
  capnp::MallocMessageBuilder mb;
  fill(mb.initRoot<wire::sync::SyncRequest>());
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(mb);
  std::vector<uint8_t> out(words.size() * sizeof(capnp::word));
  std::memcpy(out.data(), words.begin(), out.size());
  return out;
}

bucket_msg two_chunk_bucket() {
  bucket_msg b;
  b.version = 3;
  b.seq = 1;
  b.chunks = {{"model.embed_tokens.weight", dtype::bf16, {4, 2}, 0, 16},
              {"layers.0.ffn.gate.tid2eid", dtype::i64, {2, 1}, 8, 8}};
  return b;
}

TEST(sync_codec, every_message_round_trips) {
  for (const sync_request& r : {sync_request{begin_msg{3, 305, 1 << 20}}, sync_request{two_chunk_bucket()},
                                sync_request{end_msg{3, 0xdeadbeef}}, sync_request{abort_msg{3}}}) {
    auto p = encode_request(r);
    ASSERT_TRUE(p.ok());
    std::vector<uint8_t> d0(16), d1(8);
    std::vector<frame_view> data;
    if (std::holds_alternative<bucket_msg>(r)) data = {view(d0), view(d1)};
    auto back = decode_request(view(request_header()), view(*p), data);
    ASSERT_TRUE(back.ok()) << back.get_status().to_string();
    EXPECT_EQ(back->index(), r.index());
  }
  auto b = decode_request(view(request_header()), view(*encode_request(two_chunk_bucket())),
                          {view(std::vector<uint8_t>(16)), view(std::vector<uint8_t>(8))});
  ASSERT_TRUE(b.ok());
  const bucket_msg& m = std::get<bucket_msg>(*b);
  EXPECT_EQ(m.chunks[1].name, "layers.0.ffn.gate.tid2eid");
  EXPECT_EQ(m.chunks[1].type, dtype::i64);
  EXPECT_EQ(m.chunks[1].shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(m.chunks[1].byte_offset, 8u);
  auto e = decode_request(view(request_header()), view(*encode_request(end_msg{3, 0xdeadbeef, 7})), {});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(std::get<end_msg>(*e).crc32c, 0xdeadbeefu);
  EXPECT_EQ(std::get<end_msg>(*e).n_buckets, 7u);

  sync_reply r;
  r.version = 3;
  r.phase = sync_phase::end;
  r.code = status_code::data_loss;
  r.message = "checksum";
  r.serving_version = 2;
  auto rp = encode_reply(r);
  auto rb = decode_reply(view(reply_header()), view(*rp));
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->code, status_code::data_loss);
  EXPECT_EQ(rb->to_status().code(), status_code::data_loss);
  EXPECT_EQ(rb->serving_version, 2u);
}

TEST(sync_codec, bad_frames_are_invalid_argument_naming_the_problem) {
  auto p = *encode_request(two_chunk_bucket());
  std::vector<uint8_t> d0(16), d1(8), short1(7);
  auto expect_bad = [](const status_or<sync_request>& r, const std::string& needle) {
    ASSERT_STATUS(r, status_code::invalid_argument, needle);
  };
  expect_bad(decode_request(view(request_header()), view(p), {view(d0)}), "data frames");
  expect_bad(decode_request(view(request_header()), view(p), {view(d0), view(short1)}), "data frame has 7");
  expect_bad(decode_request(view(reply_header()), view(p), {view(d0), view(d1)}), "kind");
  std::array<uint8_t, 2> v2{2, k_kind_request};
  expect_bad(decode_request(view(v2), view(p), {view(d0), view(d1)}), "version");
  std::vector<uint8_t> junk(64, 0xff);
  expect_bad(decode_request(view(request_header()), view(junk), {}), "payload");
  std::vector<uint8_t> odd(p.begin(), p.end() - 1);
  expect_bad(decode_request(view(request_header()), view(odd), {}), "multiple of 8");
  auto begin0 = *encode_request(begin_msg{1, 0, 0});
  expect_bad(decode_request(view(request_header()), view(begin0), {}), "tensorCount");
  auto end = *encode_request(end_msg{1, 0});
  expect_bad(decode_request(view(request_header()), view(end), {view(d0)}), "data frames");
  bucket_msg past = two_chunk_bucket();
  past.chunks[0].byte_offset = 8;  // 8 + 16 > 16 bytes of the tensor
  expect_bad(decode_request(view(request_header()), view(*encode_request(past)), {view(d0), view(d1)}),
             "outside");
}

// A chunk in CUDA memory (Chunk.ipcHandle) carries no data frame: frames match
// the other chunks, in order; a handle of another size is refused.
TEST(sync_codec, chunks_in_cuda_memory_carry_no_data_frame) {
  bucket_msg b = two_chunk_bucket();
  b.chunks[0].ipc_handle.assign(k_ipc_handle_bytes, 0xab);
  b.chunks[0].ipc_offset = 4096;
  auto p = encode_request(b);
  ASSERT_TRUE(p.ok()) << p.get_status().to_string();
  std::vector<uint8_t> d1(8);
  auto back = decode_request(view(request_header()), view(*p), {view(d1)});
  ASSERT_TRUE(back.ok()) << back.get_status().to_string();
  const bucket_msg& m = std::get<bucket_msg>(*back);
  ASSERT_TRUE(m.chunks[0].in_cuda_memory());
  EXPECT_EQ(m.chunks[0].ipc_handle, std::vector<uint8_t>(k_ipc_handle_bytes, 0xab));
  EXPECT_EQ(m.chunks[0].ipc_offset, 4096u);
  EXPECT_FALSE(m.chunks[1].in_cuda_memory());
  std::vector<uint8_t> d0(16);
  auto two = decode_request(view(request_header()), view(*p), {view(d0), view(d1)});
  EXPECT_EQ(two.get_status().code(), status_code::invalid_argument) << "a frame for the chunk in CUDA memory";
  b.chunks[0].ipc_handle.resize(12);
  EXPECT_EQ(encode_request(b).get_status().code(), status_code::invalid_argument) << "a handle of 12 bytes";
}

// An update by NCCL: begin carries the 128-byte unique id (and whether the group
// is open already); its chunks marked nccl carry no data frame. An id of
// another size, reuse without an id, or a chunk both nccl and IPC is refused
// when encoded and when decoded.
TEST(sync_codec, an_update_by_nccl_names_its_group_and_its_chunks_carry_no_data_frame) {
  begin_msg b{3, 305, 1 << 20};
  b.nccl_id.assign(k_nccl_id_bytes, 0x11);
  b.nccl_reuse = true;
  auto bp = encode_request(b);
  ASSERT_TRUE(bp.ok()) << bp.get_status().to_string();
  auto bb = decode_request(view(request_header()), view(*bp), {});
  ASSERT_TRUE(bb.ok()) << bb.get_status().to_string();
  EXPECT_EQ(std::get<begin_msg>(*bb).nccl_id, b.nccl_id);
  EXPECT_TRUE(std::get<begin_msg>(*bb).nccl_reuse);
  auto plain = decode_request(view(request_header()), view(*encode_request(begin_msg{3, 305, 1 << 20})), {});
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(std::get<begin_msg>(*plain).nccl_id.empty()) << "no id: no NCCL group";

  bucket_msg k = two_chunk_bucket();
  k.chunks[1].nccl = true;
  auto kp = encode_request(k);
  ASSERT_TRUE(kp.ok()) << kp.get_status().to_string();
  std::vector<uint8_t> d0(16), d1(8);
  auto kb = decode_request(view(request_header()), view(*kp), {view(d0)});
  ASSERT_TRUE(kb.ok()) << kb.get_status().to_string();
  const bucket_msg& m = std::get<bucket_msg>(*kb);
  EXPECT_TRUE(m.chunks[1].nccl);
  EXPECT_TRUE(m.chunks[1].in_cuda_memory());
  EXPECT_TRUE(m.chunks[1].ipc_handle.empty());
  EXPECT_FALSE(m.chunks[0].nccl);
  EXPECT_EQ(decode_request(view(request_header()), view(*kp), {view(d0), view(d1)}).get_status().code(),
            status_code::invalid_argument)
      << "a data frame for the chunk by NCCL";

  auto expect_bad = [](const status& s, const std::string& needle) {
    EXPECT_STATUS(s, status_code::invalid_argument, needle);
  };
  begin_msg short_id{3, 1, 8};
  short_id.nccl_id.assign(12, 1);
  expect_bad(encode_request(short_id).get_status(), "NCCL unique id of 12 bytes");
  begin_msg reuse_alone{3, 1, 8};
  reuse_alone.nccl_reuse = true;
  expect_bad(encode_request(reuse_alone).get_status(), "ncclReuse without");
  bucket_msg both = two_chunk_bucket();
  both.chunks[0].nccl = true;
  both.chunks[0].ipc_handle.assign(k_ipc_handle_bytes, 1);
  expect_bad(encode_request(both).get_status(), "both");

  // The same, as another sender could write them.
  const std::vector<uint8_t> twelve(12, 1);
  auto short_wire = raw_request([&](wire::sync::SyncRequest::Builder r) {
    auto o = r.initBegin();
    o.setVersion(3);
    o.setTensorCount(1);
    o.setNcclUniqueId(capnp::Data::Reader(twelve.data(), twelve.size()));
  });
  expect_bad(decode_request(view(request_header()), view(short_wire), {}).get_status(),
             "NCCL unique id of 12 bytes");
  auto reuse_wire = raw_request([](wire::sync::SyncRequest::Builder r) {
    auto o = r.initBegin();
    o.setVersion(3);
    o.setTensorCount(1);
    o.setNcclReuse(true);
  });
  expect_bad(decode_request(view(request_header()), view(reuse_wire), {}).get_status(), "ncclReuse without");
  const std::vector<uint8_t> handle(k_ipc_handle_bytes, 1);
  auto both_wire = raw_request([&](wire::sync::SyncRequest::Builder r) {
    auto o = r.initBucket();
    o.setVersion(3);
    auto c = o.initChunks(1)[0];
    c.setName("norm.weight");
    c.setDtype(wire::sync::DType::F32);
    c.initShape(1).set(0, 2);
    c.setLength(8);
    c.setIpcHandle(capnp::Data::Reader(handle.data(), handle.size()));
    c.setNccl(true);
  });
  expect_bad(decode_request(view(request_header()), view(both_wire), {}).get_status(), "both");
}

}  // namespace
}  // namespace hart::weight_sync
