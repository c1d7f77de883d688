// The NCCL communicator on one rank (docs/distributed.md, "NCCL"; one GPU cannot host two ranks of
// one NCCL communicator, so several ranks are not tested here): asked for by name on a CUDA
// backend, it is built even for one rank, and every collective leaves every bit as it was (a
// one-rank reduce, average, max and broadcast are the identity; -0 and inf included), in f32
// and, for the copies, f16. Its argument checks refuse what the CPU
// communicator refuses. Skipped without a GPU or without NCCL in the build.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "ampctl/backend/backend.h"
#include "ampctl/dist/process_group.h"

namespace ampctl::dist {
namespace {

std::vector<uint32_t> bits(Backend& b, const Tensor& t) {
  std::vector<uint32_t> out(t.numel());
  b.download(out.data(), t);
  return out;
}

TEST(NcclOneRank, EveryCollectiveLeavesEveryBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  if (!nccl_compiled()) GTEST_SKIP() << "built without NCCL";
  auto gpu = make_cuda_backend(0);
  CommunicatorOptions o;
  o.backend = CommBackend::nccl;
  std::unique_ptr<Communicator> comm = make_communicator(*gpu, o);
  ASSERT_EQ(comm->world_size(), 1);
  ASSERT_EQ(comm->rank(), 0);
  // (No NaN or subnormal: NCCL's average multiplies by 1/N, and whether its kernels keep a NaN's
  // payload or a subnormal is NCCL's business.)
  std::vector<float> v = {1.5f,   -0.0f, std::numeric_limits<float>::infinity(), 65504.0f, 3.0f,
                          -7.25f, 0.1f};
  const Tensor t = gpu->from_host({static_cast<int64_t>(v.size())}, DType::f32, v.data());
  const std::vector<uint32_t> want = bits(*gpu, t);
  comm->all_reduce(t, ReduceOp::mean);
  EXPECT_EQ(bits(*gpu, t), want);
  comm->all_reduce(t, ReduceOp::sum);
  EXPECT_EQ(bits(*gpu, t), want);
  comm->reduce_scatter(t, ReduceOp::mean);
  EXPECT_EQ(bits(*gpu, t), want);
  comm->all_gather_shards(t);
  EXPECT_EQ(bits(*gpu, t), want);
  comm->broadcast(t, 0);
  EXPECT_EQ(bits(*gpu, t), want);
  const Tensor flag = gpu->zeros({1}, DType::f32);
  gpu->fill(flag, 1.0);
  comm->all_reduce(flag, ReduceOp::max);
  EXPECT_EQ(gpu->read_scalar_f32(flag), 1.0f);
  const Tensor out = gpu->empty({static_cast<int64_t>(v.size())}, DType::f32);
  comm->all_gather(t, out);
  EXPECT_EQ(bits(*gpu, out), want);
  // An f16 copy (ZeRO-1's parameters' copy travels the same way).
  const Tensor h = gpu->empty({static_cast<int64_t>(v.size())}, DType::f16);
  gpu->cast(t, h);
  std::vector<uint16_t> h0(v.size()), h1(v.size());
  gpu->download(h0.data(), h);
  comm->all_gather_shards(h);
  gpu->download(h1.data(), h);
  EXPECT_EQ(h0, h1);
  comm->barrier();
  EXPECT_EQ(comm->all_reduce_host(7, ReduceOp::sum), 7);
  // The checks: a CPU tensor, a sum of f16, a root outside [0, 1).
  auto cpu = make_cpu_backend(1);
  const Tensor c = cpu->zeros({3}, DType::f32);
  EXPECT_THROW(comm->all_reduce(c, ReduceOp::sum), Error);
  EXPECT_THROW(comm->reduce_scatter(h, ReduceOp::sum), Error);
  EXPECT_THROW(comm->broadcast(t, 1), Error);
}

}  // namespace
}  // namespace ampctl::dist
