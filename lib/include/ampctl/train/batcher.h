// Batcher: the training and evaluation batches of a run, on the backend, as the step and the
// loop take them; two implementations: DeviceBatcher (rows of a feature table) and LmBatcher
// (windows of a token array).
//
// DeviceBatcher:
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
#include "ampctl/data/lm.h"

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
  // Training batches: the rows of the whole global batch, every rank's shard (= rows with one
  // rank), which the throughput and the totals count (docs/distributed.md).
  int64_t global_rows = 0;
};

// What the loop holds. The cursor is two integers (read at every step without allocating) so a
// stop between micro-batches can rewind to where the step began.
class Batcher {
 public:
  virtual ~Batcher() = default;
  // The next training batch (the cursor advances), valid until the next call. Allocates
  // nothing.
  virtual const Batch& next() = 0;
  // Classification batches: the loop counts correct rows (eval accuracy).
  virtual bool classification() const = 0;
  virtual bool has_eval() const = 0;
  // The rows an evaluation covers on this rank, in eval_batch(first) calls for first = 0,
  // rows, ...; eval_total() those of every rank (the same with one rank).
  virtual int64_t eval_size() const = 0;
  virtual int64_t eval_total() const { return eval_size(); }
  // The evaluation batch starting at row `first`; valid until the next eval_batch or next.
  virtual Batch eval_batch(int64_t first) = 0;
  // data.eval's sets (docs/reference.md, "Evaluation sets"): how many there are (0 without
  // evaluation data), and which one eval_size, eval_total and eval_batch walk (0, the first, until
  // another is chosen). Selecting allocates nothing.
  virtual size_t eval_sets() const = 0;
  virtual void select_eval(size_t set) = 0;
  // The data cursor a checkpoint keeps, and its restore (Error{input} for a bad one).
  virtual nlohmann::json state() const = 0;
  virtual void restore(const nlohmann::json& state) = 0;
  struct Cursor {
    int64_t a = 0, b = 0;
  };
  virtual Cursor cursor() const = 0;
  virtual void rewind(Cursor cursor) = 0;
};

class DeviceBatcher : public Batcher {
 public:
  // `data` and `loader` (which serves data.train) must outlive the batcher. Allocates every
  // buffer a batch needs. images: hand the model image batches [rows, C, H, W] (the same rows,
  // viewed with the data set's image shape; a cnn) instead of feature rows [rows, features];
  // Error{config} naming model.type when the data set has no image shape.
  DeviceBatcher(Backend& backend, const data::DataSplit& data, data::DataLoader& loader,
                int64_t batch_size, bool images = false);
  DeviceBatcher(const DeviceBatcher&) = delete;
  DeviceBatcher& operator=(const DeviceBatcher&) = delete;

  bool classification() const override { return m_classification; }
  int64_t features() const { return m_features; }
  // Classes (classification) or target width (regression): the model's output width.
  int64_t outputs() const { return m_outputs; }
  int64_t batch_size() const { return m_batch; }

  // Data parallel (docs/distributed.md): this process is rank `rank` of `world`. The loader then
  // serves global batches (batch_size x world rows of one global shuffle) and next() gives
  // shard `rank` of each (split as evenly as possible; rows [r * B, (r + 1) * B) of a full
  // one); the evaluation walks this rank's contiguous shard of the eval set.
  void set_shard(int rank, int world);

  // The next training batch (the loader's cursor advances), valid until the next call.
  const Batch& next() override;

  bool has_eval() const override { return m_eval_total > 0; }
  size_t eval_sets() const override { return m_eval_sets.size(); }
  void select_eval(size_t set) override;
  int64_t eval_size() const override { return m_eval_rows; }    // this rank's shard
  int64_t eval_total() const override { return m_eval_total; }  // every rank's
  // Rows [first, first + min(batch_size, eval_size - first)) of this rank's eval shard (views).
  Batch eval_batch(int64_t first) override;

  // The loader's cursor ({"epoch", "position"}), and its restore (uploads the epoch's order).
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;
  // {epoch, position}.
  Cursor cursor() const override;
  void rewind(Cursor cursor) override;

 private:
  struct Resident {
    Tensor x, labels, y;
  };
  static Resident resident(Backend& b, const data::Dataset& d);
  void upload_order();
  void shard_eval();  // this rank's rows of the selected evaluation set

  Backend* m_backend;
  data::DataLoader* m_loader;
  bool m_classification = true;
  int64_t m_features = 0, m_outputs = 0, m_batch = 0, m_eval_rows = 0, m_eval_total = 0;
  int64_t m_eval_first = 0;
  int m_rank = 0, m_world = 1;
  Resident m_train, m_eval;           // m_eval: the selected set's
  std::vector<Resident> m_eval_sets;  // every evaluation set, in order
  std::vector<int32_t> m_order_host;
  Tensor m_order_dev;
  Tensor m_x, m_labels, m_y;  // one batch, gathered
  Batch m_current;
  std::vector<int64_t> m_image;  // [C, H, W] when batches are images, else empty
  // The input of `rows` rows starting at element `offset` of x, as the model takes it.
  Tensor input_view(const Tensor& x, size_t offset, int64_t rows) const;
};

// LmBatcher: language-model batches (data/lm.h). The token arrays live on the backend for the
// whole run (CPU: views of the host vectors). Training batch k is the windows
// data::window_indices(seed, false, k, B, n, T) draws: the host computes their B * T element
// indices into a buffer made once, uploads them (B * T int32, the step's only transfer, no
// sync) and the backend gathers input i32 [B, T] = tokens[index] and target i32 [B * T] =
// tokens[index + 1]. Evaluation: eval_batches batches from the eval stream, whose indices are
// computed and uploaded once at construction; eval_batch(first) gathers batch first / B.
// The cursor is the number of training batches drawn, {"batches": k}.
//
// Data parallel (docs/distributed.md), rank r of N: batch k is global, the B x N windows
// window_indices(seed, false, k, B * N, n, T) draws, and this rank takes its rows [r B, (r+1) B)
// (so 2 ranks x B see exactly the windows of 1 rank x 2B); evaluation batch j likewise is
// B x N windows of the eval stream, rank r evaluating its B of each. One rank: all of it.
class LmBatcher : public Batcher {
 public:
  // `data` must outlive the batcher. Allocates every buffer.
  LmBatcher(Backend& backend, const data::LmData& data, int64_t batch_size, int64_t block_size,
            int64_t eval_batches, uint64_t seed, int rank = 0, int world = 1);
  LmBatcher(const LmBatcher&) = delete;
  LmBatcher& operator=(const LmBatcher&) = delete;

  const Batch& next() override;
  bool classification() const override { return false; }
  bool has_eval() const override { return m_eval_n > 0; }
  size_t eval_sets() const override { return m_eval_streams.size(); }
  void select_eval(size_t set) override;
  int64_t eval_size() const override { return m_eval_batches * m_batch; }  // this rank's
  int64_t eval_total() const override { return eval_size() * m_world; }
  Batch eval_batch(int64_t first) override;
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;
  Cursor cursor() const override { return {m_drawn, 0}; }
  void rewind(Cursor cursor) override { m_drawn = cursor.a; }

  int64_t batch_size() const { return m_batch; }
  int64_t block_size() const { return m_block; }
  int64_t batches_drawn() const { return m_drawn; }

 private:
  Backend* m_backend;
  int64_t m_batch, m_block, m_eval_batches;
  uint64_t m_seed;
  int m_rank = 0, m_world = 1;
  int64_t m_train_n = 0, m_eval_n = 0;
  int64_t m_drawn = 0;
  Tensor m_train, m_train_next;  // i32 [n, 1] and the same shifted by one token [n - 1, 1]
  Tensor m_eval, m_eval_next;
  std::vector<int32_t> m_index_host;  // B * T
  Tensor m_index_dev;                 // i32 [B * T]
  Tensor m_eval_index;                // i32 [eval_batches * B * T]
  Tensor m_input, m_target;           // i32 [B, T], [B * T]
  Tensor m_eval_input, m_eval_target;
  // Every evaluation set's tokens, shifted tokens and fixed windows; m_eval, m_eval_next,
  // m_eval_index and m_eval_n are the selected one's.
  struct EvalStream {
    Tensor tokens, next, index;
    int64_t n = 0;
  };
  std::vector<EvalStream> m_eval_streams;
  Batch m_current;
};

}  // namespace ampctl::train
