// DeviceBatcher: the training and evaluation batches of a run, on the backend.
//
// The data sets live on the backend for the whole run (on the CPU the tensors view the data
// set's own vectors; elsewhere they are copied once). A training batch is gathered there by the
// DataLoader's permutation, which is uploaded once per epoch, so a step copies nothing from the
// host and allocates nothing. Evaluation walks the resident eval set in stored order:
// contiguous rows, views only.
//
// What a batch holds is agreed between the data source and the model: here, f32 features
// [rows, features] and a target that is i32 labels [rows] (classification) or f32 [rows,
// targets] (regression). The loop only passes batches from here to the model.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "ampctl/core/tensor.h"
#include "ampctl/data/dataset.h"

namespace ampctl {
class Backend;
namespace data {
class DataLoader;
}
}  // namespace ampctl

namespace ampctl::train {

// One batch as the model takes it (nn::Model::forward and loss): the loop passes it on and
// looks at nothing but its row count.
struct Batch {
  Tensor input;   // here f32 [rows, features], or images [rows, C, H, W] (a cnn)
  Tensor target;  // here i32 [rows] labels, or f32 [rows, targets]
  int64_t rows = 0;
};

class DeviceBatcher {
 public:
  // `data` and `loader` (which serves data.train) must outlive the batcher. Allocates every
  // buffer a batch needs. images: hand the model image batches [rows, C, H, W] (the same rows,
  // viewed with the data set's image shape; a cnn) instead of feature rows [rows, features];
  // Error{config} naming model.type when the data set has no image shape.
  DeviceBatcher(Backend& backend, const data::DataSplit& data, data::DataLoader& loader,
                int64_t batch_size, bool images = false);
  DeviceBatcher(const DeviceBatcher&) = delete;
  DeviceBatcher& operator=(const DeviceBatcher&) = delete;

  bool classification() const { return m_classification; }
  int64_t features() const { return m_features; }
  // Classes (classification) or target width (regression): the model's output width.
  int64_t outputs() const { return m_outputs; }
  int64_t batch_size() const { return m_batch; }

  // The next training batch (the loader's cursor advances), valid until the next call.
  const Batch& next();

  bool has_eval() const { return m_eval_rows > 0; }
  int64_t eval_size() const { return m_eval_rows; }
  // Rows [first, first + min(batch_size, eval_size - first)) of the eval set.
  Batch eval_batch(int64_t first) const;

  // The loader's cursor ({"epoch", "position"}), and its restore (uploads the epoch's order).
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  struct Resident {
    Tensor x, labels, y;
  };
  static Resident resident(Backend& b, const data::Dataset& d);
  void upload_order();

  Backend* m_backend;
  data::DataLoader* m_loader;
  bool m_classification = true;
  int64_t m_features = 0, m_outputs = 0, m_batch = 0, m_eval_rows = 0;
  Resident m_train, m_eval;
  std::vector<int32_t> m_order_host;
  Tensor m_order_dev;
  Tensor m_x, m_labels, m_y;  // one batch, gathered
  Batch m_current;
  std::vector<int64_t> m_image;  // [C, H, W] when batches are images, else empty
  // The input of `rows` rows starting at element `offset` of x, as the model takes it.
  Tensor input_view(const Tensor& x, size_t offset, int64_t rows) const;
};

}  // namespace ampctl::train
