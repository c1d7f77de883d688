#include "ampctl/nn/loss.h"

#include "ampctl/nn/numerics.h"

namespace ampctl::nn {
namespace {

void check_scalar_arg(const Tensor& t, DType dtype, const char* what) {
  if (!t.defined() || (t.dtype() == dtype && t.numel() == 1)) return;
  throw Error{ErrorKind::invalid_argument, std::string(what) + ": expected a one-element " +
                                               dtype_name(dtype) + " tensor, got " + t.describe()};
}

}  // namespace

Loss::Loss(LossKind type, int64_t outputs) : m_type(type), m_outputs(outputs) {
  if (m_outputs < 1) {
    throw Error{ErrorKind::invalid_argument,
                "loss: outputs must be >= 1, got " + std::to_string(m_outputs)};
  }
}

void Loss::setup(Backend& backend, int64_t max_batch, DType act, GradNumerics* numerics) {
  m_backend = &backend;
  m_dlogits = RowViews(backend.zeros({max_batch, m_outputs}, act));
  m_numerics = numerics;
  if (m_numerics) {
    m_site = m_numerics->add_site();
    m_dlogits_f32 = RowViews(m_numerics->workspace({max_batch, m_outputs}));
  }
}

void Loss::setup_in_place(Backend& backend, const Tensor& logits, GradNumerics* numerics) {
  if (m_type != LossKind::cross_entropy) {
    throw Error{ErrorKind::invalid_argument, "loss: only cross_entropy writes dlogits in place"};
  }
  if (!logits.defined() || logits.rank() != 2 || logits.dim(1) != m_outputs) {
    throw Error{ErrorKind::invalid_argument,
                "loss: in-place dlogits need the [rows, " + std::to_string(m_outputs) +
                    "] logits buffer, got " +
                    (logits.defined() ? logits.describe() : std::string("none"))};
  }
  m_backend = &backend;
  m_dlogits = RowViews(logits);
  m_numerics = numerics;
  if (m_numerics) {
    m_site = m_numerics->add_site();
    m_dlogits_f32 = RowViews(m_numerics->workspace({logits.dim(0), m_outputs}));
  }
}

bool Loss::forward(const Tensor& logits, const Tensor& targets, int64_t batch,
                   const Tensor& loss_out, const Tensor& correct_out, const Tensor& grad_scale) {
  if (!loss_out.defined()) throw Error{ErrorKind::invalid_argument, "loss: loss_out is required"};
  check_scalar_arg(loss_out, DType::f32, "loss: loss_out");
  check_scalar_arg(correct_out, DType::i32, "loss: correct_out");
  check_scalar_arg(grad_scale, DType::f32, "loss: grad_scale");
  const Tensor& dlogits = grad_scale.defined() ? m_dlogits.rows(batch) : m_undefined;
  // A sampled step (nn/numerics.h): dlogits in f32, then one counted rounding to lowp.
  const bool counted = m_numerics && m_numerics->active() && dlogits.defined();
  const Tensor& grad_out = counted ? m_dlogits_f32.rows(batch) : dlogits;
  switch (m_type) {
    case LossKind::cross_entropy: {
      if (!targets.defined() || targets.rank() != 1 || targets.dtype() != DType::i32 ||
          targets.dim(0) < batch) {
        throw Error{ErrorKind::invalid_argument,
                    "cross_entropy: expected i32 [>= " + std::to_string(batch) +
                        "] class labels, got " +
                        (targets.defined() ? targets.describe() : std::string("none"))};
      }
      m_backend->softmax_cross_entropy(logits, m_targets.of(targets, batch), loss_out, correct_out,
                                       grad_out, grad_scale);
      break;
    }
    case LossKind::mse: {
      if (correct_out.defined()) {
        throw Error{ErrorKind::invalid_argument,
                    "mse: correct_out is only defined for cross_entropy"};
      }
      check_matrix(targets, batch, m_outputs, DType::f32, /*exact=*/false, "mse targets");
      m_backend->mse(logits, m_targets.of(targets, batch), loss_out, grad_out, grad_scale);
      break;
    }
  }
  if (counted) m_numerics->round_site(grad_out, dlogits, m_site);
  return grad_scale.defined();
}

}  // namespace ampctl::nn
