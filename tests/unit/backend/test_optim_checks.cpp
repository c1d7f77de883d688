// Backend::optimizer_step's argument checks (check_optimizer_step in
// lib/src/backend/checks/optim.cpp, written once and run by both backends): each mistake is refused
// with Error{invalid_argument} whose message names the update and the operand, before anything is
// written; tensors of the other kind of update are refused rather than ignored. The CUDA backend
// runs the same function with its device (the "not on this device" case is covered in tests/cuda,
// where a second device exists).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "ampctl/backend/backend.h"
#include "unit/backend/backend_test_util.h"

namespace ampctl::test {
namespace {

constexpr int64_t kN = 8;

struct Case {
  std::string what;     // the mistake
  std::string message;  // a part of the message it must give
  std::function<void(Backend&, OptimizerStepArgs&)> spoil;
};

OptimizerStepArgs good_sgd(Backend& be) {
  OptimizerStepArgs a;
  a.params = be.zeros({kN}, DType::f32);
  a.grads = be.zeros({kN}, DType::f32);
  a.momentum_buf = be.zeros({kN}, DType::f32);
  a.step = scalar_i32(be, 0);
  a.found_inf = scalar_f32(be, 0.0f);
  a.inv_scale = scalar_f32(be, 1.0f);
  a.lowp_params = be.zeros({kN}, DType::f16);
  optim::SgdHyper h;
  h.momentum = 0.9f;
  a.hyper = h;
  return a;
}

OptimizerStepArgs good_adam(Backend& be) {
  OptimizerStepArgs a;
  a.params = be.zeros({kN}, DType::f32);
  a.grads = be.zeros({kN}, DType::f32);
  a.exp_avg = be.zeros({kN}, DType::f32);
  a.exp_avg_sq = be.zeros({kN}, DType::f32);
  a.step = scalar_i32(be, 0);
  a.found_inf = scalar_f32(be, 0.0f);
  a.inv_scale = scalar_f32(be, 1.0f);
  a.lowp_params = be.zeros({kN}, DType::bf16);
  a.hyper = optim::AdamHyper{};
  return a;
}

// Runs f and expects Error{invalid_argument} whose message contains `part`.
void expect_refused(const std::function<void()>& f, const std::string& what,
                    const std::string& part) {
  try {
    f();
    ADD_FAILURE() << what << ": accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << what << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << what << ": message '" << e.what() << "' lacks '" << part << "'";
  }
}

TEST(OptimizerStepChecks, SharedOperandsAreCheckedForBothKinds) {
  auto be = cpu_backend();
  const std::vector<Case> cases = {
      {"f16 params", "params must be f32",
       [](Backend& b, OptimizerStepArgs& a) { a.params = b.zeros({kN}, DType::f16); }},
      {"undefined grads", "grads is undefined",
       [](Backend&, OptimizerStepArgs& a) { a.grads = Tensor{}; }},
      {"short grads", "differ in element count",
       [](Backend& b, OptimizerStepArgs& a) { a.grads = b.zeros({kN - 1}, DType::f32); }},
      {"f32 step", "step must be a one-element i32",
       [](Backend& b, OptimizerStepArgs& a) { a.step = scalar_f32(b, 0.0f); }},
      {"two-element found_inf", "found_inf must be a one-element f32",
       [](Backend& b, OptimizerStepArgs& a) { a.found_inf = b.zeros({2}, DType::f32); }},
      {"i32 inv_scale", "inv_scale must be a one-element f32",
       [](Backend& b, OptimizerStepArgs& a) { a.inv_scale = scalar_i32(b, 1); }},
      {"i32 lowp copy", "lowp_params must be f32, f16 or bf16",
       [](Backend& b, OptimizerStepArgs& a) { a.lowp_params = b.zeros({kN}, DType::i32); }},
      {"long lowp copy", "lowp_params",
       [](Backend& b, OptimizerStepArgs& a) { a.lowp_params = b.zeros({kN + 1}, DType::f16); }},
  };
  for (const auto& make : {good_sgd, good_adam}) {
    for (const Case& c : cases) {
      OptimizerStepArgs a = make(*be);
      const std::string op = update_name(a);
      c.spoil(*be, a);
      expect_refused([&] { be->optimizer_step(a); }, op + ", " + c.what, op + ": ");
      expect_refused([&] { be->optimizer_step(a); }, op + ", " + c.what, c.message);
    }
    // The unspoilt arguments are accepted: the refusals above are about the mistakes.
    OptimizerStepArgs ok = make(*be);
    be->optimizer_step(ok);
    EXPECT_EQ(be->read_scalar_i32(ok.step), 1) << update_name(ok);
  }
}

TEST(OptimizerStepChecks, EachKindsStateIsCheckedAndTheOtherKindsRefused) {
  auto be = cpu_backend();
  {
    OptimizerStepArgs a = good_sgd(*be);
    a.momentum_buf = Tensor{};
    expect_refused([&] { be->optimizer_step(a); }, "sgd without its buffer",
                   "sgd_step: momentum_buf is undefined");
    a.momentum_buf = be->zeros({kN}, DType::f16);
    expect_refused([&] { be->optimizer_step(a); }, "f16 buffer", "momentum_buf must be f32");
    // Without momentum the buffer is not needed (and not touched).
    std::get<optim::SgdHyper>(a.hyper).momentum = 0.0f;
    a.momentum_buf = Tensor{};
    be->optimizer_step(a);
    EXPECT_EQ(be->read_scalar_i32(a.step), 1);
    OptimizerStepArgs b = good_sgd(*be);
    b.exp_avg = be->zeros({kN}, DType::f32);
    expect_refused([&] { be->optimizer_step(b); }, "sgd with exp_avg",
                   "sgd_step: exp_avg belongs to another kind");
    EXPECT_EQ(be->read_scalar_i32(b.step), 0) << "nothing written";
  }
  {
    OptimizerStepArgs a = good_adam(*be);
    a.exp_avg_sq = be->zeros({kN + 2}, DType::f32);
    expect_refused([&] { be->optimizer_step(a); }, "long exp_avg_sq", "adam_step: exp_avg_sq");
    a = good_adam(*be);
    a.exp_avg = Tensor{};
    expect_refused([&] { be->optimizer_step(a); }, "adam without exp_avg",
                   "adam_step: exp_avg is undefined");
    a = good_adam(*be);
    a.momentum_buf = be->zeros({kN}, DType::f32);
    expect_refused([&] { be->optimizer_step(a); }, "adam with a momentum buffer",
                   "adam_step: momentum_buf belongs to another kind");
    EXPECT_EQ(be->read_scalar_i32(a.step), 0) << "nothing written";
  }
}

}  // namespace
}  // namespace ampctl::test
