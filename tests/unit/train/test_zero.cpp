// ZeRO-1's pieces in one process (docs/distributed.md, "ZeRO-1"): the optimizer over shards of
// the arena (train::shard_groups, the decay mask indexed by global position) updates every
// element, its moments and its fp16 copy bitwise as the optimizer over the whole arena does, for
// an uneven split into 2 and 3 fake ranks; and the scaler's found_inf hook, the point where the
// ranks agree, makes a rank whose own shard is finite skip and back off as the one that
// overflowed does, on the fused path and after unscale_ (clipping's path).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ampctl/amp/grad_scaler.h"
#include "ampctl/backend/backend.h"
#include "ampctl/dist/communicator.h"
#include "ampctl/nn/models.h"
#include "ampctl/optim/adam.h"
#include "ampctl/optim/sgd.h"
#include "ampctl/train/build.h"

namespace ampctl {
namespace {

using Range = dist::Communicator::Range;

// A GPT has matrices and vectors, so the decay mask has both 0 and 1 in every shard.
std::unique_ptr<nn::Model> small_gpt(Backend& b) {
  nn::ModelOptions o;
  o.type = nn::ModelType::gpt;
  o.compute = DType::f16;
  o.precision = "fp16";
  o.in_features = o.out_features = 7;
  o.max_batch = 1;
  o.seed = 5;
  o.gpt = {1, 2, 8, 4, 0.0, true, true};
  return nn::build_model(b, o);
}

std::vector<uint32_t> bits(Backend& b, const Tensor& t) {
  std::vector<uint32_t> out(t.nbytes() / 4 + (t.nbytes() % 4 != 0));
  b.download(out.data(), t);
  return out;
}

std::vector<uint16_t> bits16(Backend& b, const Tensor& t) {
  std::vector<uint16_t> out(t.numel());
  b.download(out.data(), t);
  return out;
}

enum class Kind { adamw, sgd };

std::unique_ptr<optim::Optimizer> make(Backend& b, Kind kind, std::vector<optim::ParamGroup> g) {
  if (kind == Kind::sgd) {
    optim::SgdOptions o;
    o.momentum = 0.9f;
    o.weight_decay = 0.01f;
    return std::make_unique<optim::Sgd>(b, std::move(g), o);
  }
  optim::AdamOptions o;
  o.decoupled = true;
  o.weight_decay = 0.1;
  return std::make_unique<optim::Adam>(b, std::move(g), o);
}

// The per-element state tensors of an optimizer (its f32 ones; the step counters are i32).
std::vector<Tensor> moments(const optim::Optimizer& opt) {
  std::vector<Tensor> out;
  for (const auto& [name, t] : opt.state_tensors()) {
    if (t.dtype() == DType::f32) out.push_back(t);
  }
  return out;
}

void check_sharded_equals_whole(Kind kind, int world) {
  SCOPED_TRACE(std::string(kind == Kind::sgd ? "sgd" : "adamw") + ", " + std::to_string(world) +
               " shards");
  auto be = make_cpu_backend(1);
  Backend& b = *be;
  auto whole_model = small_gpt(b), shard_model = small_gpt(b);
  const size_t n = whole_model->params().numel();
  ASSERT_EQ(bits(b, whole_model->params()), bits(b, shard_model->params()));

  std::vector<optim::ParamGroup> g = train::param_groups(*whole_model, 1e-2f);
  g[0].decay_mask = train::matrix_decay_mask(*whole_model);
  auto whole = make(b, kind, g);
  std::vector<std::unique_ptr<optim::Optimizer>> shards;
  std::vector<Range> ranges;
  for (int r = 0; r < world; ++r) {
    ranges.push_back(dist::Communicator::shard_range(n, r, world));
    std::vector<optim::ParamGroup> sg =
        train::shard_groups(train::param_groups(*shard_model, 1e-2f), ranges.back());
    sg[0].decay_mask = train::matrix_decay_mask(*shard_model, ranges.back());
    ASSERT_EQ(sg[0].params.numel(), ranges.back().size());
    shards.push_back(make(b, kind, std::move(sg)));
  }
  // The shards' masks are the whole mask's ranges.
  const std::vector<uint32_t> mask = bits(b, whole->param_groups()[0].decay_mask);
  for (int r = 0; r < world; ++r) {
    const std::vector<uint32_t> part = bits(b, shards[r]->param_groups()[0].decay_mask);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), mask.begin() + ranges[r].begin));
  }

  const Tensor found = b.zeros({1}, DType::f32);
  const Tensor inv = b.empty({1}, DType::f32);
  b.fill(inv, 1.0 / 1024.0);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 300.0f);
  for (int step = 0; step < 4; ++step) {
    std::vector<float> grads(n);
    for (float& x : grads) x = normal(rng);
    b.upload(whole_model->grads(), grads.data(), n * sizeof(float));
    b.upload(shard_model->grads(), grads.data(), n * sizeof(float));
    whole->step_amp(found, inv);
    for (auto& s : shards) s->step_amp(found, inv);
  }
  EXPECT_EQ(bits(b, whole_model->params()), bits(b, shard_model->params()));
  EXPECT_EQ(bits16(b, whole_model->lowp_params()), bits16(b, shard_model->lowp_params()));
  const std::vector<Tensor> want = moments(*whole);
  ASSERT_FALSE(want.empty());
  for (size_t k = 0; k < want.size(); ++k) {
    std::vector<uint32_t> joined;
    for (const auto& s : shards) {
      const std::vector<uint32_t> part = bits(b, moments(*s).at(k));
      joined.insert(joined.end(), part.begin(), part.end());
    }
    EXPECT_EQ(joined, bits(b, want[k])) << "state tensor " << k;
  }
}

TEST(Zero, ShardedAdamWIsBitwiseTheWholeArenaOne) {
  check_sharded_equals_whole(Kind::adamw, 2);
  check_sharded_equals_whole(Kind::adamw, 3);
}

TEST(Zero, ShardedSgdMomentumIsBitwiseTheWholeArenaOne) {
  check_sharded_equals_whole(Kind::sgd, 2);
  check_sharded_equals_whole(Kind::sgd, 3);
}

// A rank whose shard is finite while another rank's overflowed: the hook (here: the other
// rank's verdict, 1) makes it skip and back off; without it the same rank steps.
void check_hook(bool via_unscale) {
  SCOPED_TRACE(via_unscale ? "after unscale_" : "fused step");
  for (const bool other_overflowed : {false, true}) {
    auto be = make_cpu_backend(1);
    Backend& b = *be;
    auto model = small_gpt(b);
    const size_t n = model->params().numel();
    std::vector<optim::ParamGroup> g = train::shard_groups(
        train::param_groups(*model, 1e-2f), dist::Communicator::shard_range(n, 1, 2));
    auto opt = make(b, Kind::adamw, std::move(g));
    amp::GradScalerOptions so;
    so.init_scale = 1024.0;
    amp::GradScaler scaler(b, so);
    scaler.init_state();
    int calls = 0;
    scaler.set_found_inf_hook([&](const Tensor& found_inf) {
      ++calls;
      if (other_overflowed) b.fill(found_inf, 1.0);
    });
    std::vector<float> grads(n, 0.5f);
    grads[0] = std::numeric_limits<float>::infinity();  // in shard 0, not this rank's
    b.upload(model->grads(), grads.data(), n * sizeof(float));
    const std::vector<uint32_t> before = bits(b, model->params());
    if (via_unscale) scaler.unscale_(*opt);
    scaler.step(*opt);
    scaler.update();
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(b.read_scalar_f32(scaler.found_inf_tensor()), other_overflowed ? 1.0f : 0.0f);
    EXPECT_EQ(bits(b, model->params()) == before, other_overflowed);
    EXPECT_EQ(scaler.get_scale(), other_overflowed ? 512.0 : 1024.0);
  }
}

TEST(Zero, FoundInfHookMakesAFiniteShardSkipAndBackOff) {
  check_hook(false);
  check_hook(true);
}

}  // namespace
}  // namespace ampctl
