// The single-process communicator: rank 0 of 1, every collective the identity (bitwise, NaN and
// -0.0 included, and without touching the device), and the argument checks every
// implementation shares.
#include "ampctl/dist/communicator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "ampctl/backend/backend.h"

namespace ampctl::dist {
namespace {

std::vector<float> values() {
  return {1.5f,
          -0.0f,
          std::numeric_limits<float>::quiet_NaN(),
          std::numeric_limits<float>::infinity(),
          65504.0f,
          1e-45f};
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

std::vector<float> read(Backend& b, const Tensor& t) {
  std::vector<float> out(t.numel());
  b.download(out.data(), t);
  return out;
}

ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no Error thrown";
  return ErrorKind::runtime;
}

TEST(SingleProcess, IsRankZeroOfOne) {
  auto be = make_cpu_backend(1);
  SingleProcess comm(*be);
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world_size(), 1);
  EXPECT_TRUE(comm.is_root());
  EXPECT_STREQ(to_string(ReduceOp::sum), "sum");
  EXPECT_STREQ(to_string(ReduceOp::max), "max");
}

TEST(SingleProcess, AllReduceAndBroadcastLeaveEveryBitAsItWas) {
  auto be = make_cpu_backend(1);
  SingleProcess comm(*be);
  const std::vector<float> v = values();
  Tensor t = be->from_host({static_cast<int64_t>(v.size())}, DType::f32, v.data());
  comm.all_reduce(t, ReduceOp::sum);
  EXPECT_EQ(bits(read(*be, t)), bits(v));
  comm.all_reduce(t, ReduceOp::max);
  EXPECT_EQ(bits(read(*be, t)), bits(v));
  comm.broadcast(t, 0);
  EXPECT_EQ(bits(read(*be, t)), bits(v));
  comm.barrier();
}

TEST(SingleProcess, AllGatherCopiesTheOneContribution) {
  auto be = make_cpu_backend(1);
  SingleProcess comm(*be);
  const std::vector<float> v = values();
  const auto n = static_cast<int64_t>(v.size());
  Tensor in = be->from_host({n}, DType::f32, v.data());
  Tensor out = be->zeros({1, n}, DType::f32);
  comm.all_gather(in, out);
  EXPECT_EQ(bits(read(*be, out)), bits(v));
  // In place (out is in): nothing to do, nothing changes.
  comm.all_gather(in, in);
  EXPECT_EQ(bits(read(*be, in)), bits(v));
}

TEST(SingleProcess, RefusesBadArguments) {
  auto be = make_cpu_backend(1);
  SingleProcess comm(*be);
  Tensor t = be->zeros({4}, DType::f32);
  EXPECT_EQ(kind_of([&] { comm.all_reduce(Tensor{}, ReduceOp::sum); }),
            ErrorKind::invalid_argument);
  EXPECT_EQ(kind_of([&] { comm.broadcast(t, 1); }), ErrorKind::invalid_argument);
  EXPECT_EQ(kind_of([&] { comm.broadcast(t, -1); }), ErrorKind::invalid_argument);
  Tensor wrong_size = be->zeros({8}, DType::f32);
  EXPECT_EQ(kind_of([&] { comm.all_gather(t, wrong_size); }), ErrorKind::invalid_argument);
  Tensor wrong_dtype = be->zeros({4}, DType::i32);
  EXPECT_EQ(kind_of([&] { comm.all_gather(t, wrong_dtype); }), ErrorKind::invalid_argument);
  try {
    comm.all_gather(t, wrong_size);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_gather"), std::string::npos) << e.what();
  }
}

// The shards of every size up to 100 over 1..9 ranks, against a count by hand: contiguous, in
// rank order, covering [0, n) exactly once, sizes n / N or n / N + 1 with the longer ones first.
TEST(Communicator, ShardRangesTileTheBuffer) {
  for (int world = 1; world <= 9; ++world) {
    for (size_t n = 0; n <= 100; ++n) {
      size_t next = 0;
      for (int r = 0; r < world; ++r) {
        const Communicator::Range s = Communicator::shard_range(n, r, world);
        ASSERT_EQ(s.begin, next) << n << " " << world << " " << r;
        const size_t want = n / static_cast<size_t>(world) +
                            (static_cast<size_t>(r) < n % static_cast<size_t>(world) ? 1 : 0);
        ASSERT_EQ(s.size(), want) << n << " " << world << " " << r;
        next = s.end;
      }
      ASSERT_EQ(next, n);
    }
  }
}

// One rank: reduce_scatter (sum, mean, max) and all_gather_shards leave the buffer's bits as they
// were (its one shard is all of it), and a host value reduces to itself.
TEST(SingleProcess, ShardCollectivesAreTheIdentity) {
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  SingleProcess comm(*be);
  const std::vector<float> v = values();
  Tensor t = be->from_host({static_cast<int64_t>(v.size())}, DType::f32, v.data());
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max}) {
    comm.reduce_scatter(t, op);
    comm.all_reduce(t, op);
  }
  comm.all_gather_shards(t);
  EXPECT_EQ(bits(read(*be, t)), bits(v));
  EXPECT_EQ(comm.all_reduce_host(-7, ReduceOp::max), -7);
  EXPECT_EQ(comm.own_shard(10).size(), 10u);
  EXPECT_EQ(kind_of([&] { comm.reduce_scatter(Tensor{}, ReduceOp::sum); }),
            ErrorKind::invalid_argument);
}

}  // namespace
}  // namespace ampctl::dist
