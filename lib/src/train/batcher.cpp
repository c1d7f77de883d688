#include "ampctl/train/batcher.h"

#include <algorithm>
#include <memory>

#include "ampctl/backend/backend.h"
#include "ampctl/data/loader.h"

namespace ampctl::train {

DeviceBatcher::Resident DeviceBatcher::resident(Backend& b, const data::Dataset& d) {
  // On the CPU the tensors view the data set's own vectors (it outlives the batcher);
  // elsewhere they are copied to the device once.
  auto wrap = [&](const void* p, const Shape& shape, DType dtype) {
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    if (b.device().type == DeviceType::cpu) {
      return Tensor{std::make_shared<Storage>(const_cast<void*>(p), bytes, Device{}, nullptr), 0,
                    shape, dtype};
    }
    return b.from_host(shape, dtype, p);
  };
  Resident r;
  const int64_t n = d.size();
  r.x = wrap(d.x.data(), {n, d.features}, DType::f32);
  if (d.task == data::Task::classification) {
    r.labels = wrap(d.labels.data(), {n}, DType::i32);
  } else {
    r.y = wrap(d.y.data(), {n, d.targets}, DType::f32);
  }
  return r;
}

DeviceBatcher::DeviceBatcher(Backend& backend, const data::DataSplit& data,
                             data::DataLoader& loader, int64_t batch_size, bool images)
    : m_backend(&backend), m_loader(&loader), m_batch(batch_size) {
  if (images) {
    if (data.train.image.size() != 3) {
      throw Error{ErrorKind::config,
                  "model.type: cnn needs image data [N, C, H, W] (data.train.source idx or "
                  "fashion_mnist), but " +
                      data.train.origin + " holds feature rows"};
    }
    m_image = data.train.image;
  }
  Backend& b = backend;
  const data::Dataset& train = data.train;
  m_classification = train.task == data::Task::classification;
  m_features = train.features;
  m_outputs = m_classification ? train.classes : train.targets;
  m_train = resident(b, train);
  if (data.eval) {
    m_eval = resident(b, *data.eval);
    m_eval_rows = data.eval->size();
  }
  m_order_host.resize(static_cast<size_t>(train.size()));
  m_order_dev = b.empty({train.size()}, DType::i32);
  upload_order();
  m_x = b.empty({m_batch, m_features}, DType::f32);
  if (m_classification) {
    m_labels = b.empty({m_batch}, DType::i32);
  } else {
    m_y = b.empty({m_batch, m_outputs}, DType::f32);
  }
}

void DeviceBatcher::upload_order() {
  const std::vector<int64_t>& order = m_loader->order();
  for (size_t i = 0; i < order.size(); ++i) m_order_host[i] = static_cast<int32_t>(order[i]);
  m_backend->upload(m_order_dev, m_order_host.data(), m_order_dev.nbytes());
}

const Batch& DeviceBatcher::next() {
  Backend& b = *m_backend;
  int64_t first = 0;
  bool epoch_ended = false;
  const int64_t rows = m_loader->take(&first, &epoch_ended);
  m_current.rows = rows;
  const Tensor rows_view = m_x.view(0, {rows, m_features});
  b.gather_rows(m_train.x, m_order_dev, first, rows_view);
  m_current.input = input_view(m_x, 0, rows);
  if (m_classification) {
    m_current.target = m_labels.view(0, {rows});
    b.gather_rows(m_train.labels, m_order_dev, first, m_current.target);
  } else {
    m_current.target = m_y.view(0, {rows, m_outputs});
    b.gather_rows(m_train.y, m_order_dev, first, m_current.target);
  }
  // The batch above was gathered with the old order; the new epoch's goes up after it.
  if (epoch_ended) upload_order();
  return m_current;
}

Batch DeviceBatcher::eval_batch(int64_t first) const {
  Batch out;
  out.rows = std::min(m_batch, m_eval_rows - first);
  out.input = input_view(m_eval.x, static_cast<size_t>(first * m_features), out.rows);
  out.target = m_classification
                   ? m_eval.labels.view(static_cast<size_t>(first), {out.rows})
                   : m_eval.y.view(static_cast<size_t>(first * m_outputs), {out.rows, m_outputs});
  return out;
}

Tensor DeviceBatcher::input_view(const Tensor& x, size_t offset, int64_t rows) const {
  if (m_image.empty()) return x.view(offset, {rows, m_features});
  return x.view(offset, {rows, m_image[0], m_image[1], m_image[2]});
}

nlohmann::json DeviceBatcher::state() const {
  return m_loader->state();
}

void DeviceBatcher::restore(const nlohmann::json& state) {
  m_loader->restore(state);
  upload_order();
}

}  // namespace ampctl::train
