// DataLoader: serves a Dataset in mini-batches, epoch after epoch, reshuffled per epoch with a
// seeded permutation, and resumable from a two-number cursor.
//
// Epoch e visits the samples in the order epoch_permutation(seed, e) (data/random.h), or in
// stored order without shuffling. Its batches are [p, p + B) of that order for p = 0, B, 2B, ...
// while p < N; with drop_last a batch that would be short is not served. The cursor is
// (epoch, position): position is the number of samples of this epoch's order already served,
// always < N and, with drop_last, always leaving a full batch (the epoch advances as soon as
// its last batch is served). Since the permutation is a pure function of (seed, epoch), the
// cursor is all a checkpoint needs: restore(state()) continues with exactly the same batches.
//
// next() copies into caller-owned buffers and allocates nothing: the permutation lives in one
// buffer sized at construction and is rewritten in place at each epoch boundary.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "ampctl/data/dataset.h"

namespace ampctl::data {

class DataLoader {
 public:
  // `data` must outlive the loader. Throws Error{config} when drop_last leaves no batch
  // (batch_size > size) and Error{invalid_argument} for batch_size < 1 or an empty data set.
  DataLoader(const Dataset& data, int64_t batch_size, bool shuffle, bool drop_last, uint64_t seed);

  int64_t batch_size() const { return m_batch_size; }
  int64_t batches_per_epoch() const;

  // Rows the next call to next() fills: batch_size, or fewer for the last batch of an epoch
  // without drop_last.
  int64_t next_batch_rows() const;

  // Copies the next batch (x: rows * features, labels: rows, y: rows * targets; a null buffer
  // is skipped) and advances the cursor. Returns the number of rows. Buffers must hold
  // batch_size rows.
  int64_t next(float* x, int32_t* labels, float* y);

  // Advances the cursor by one batch without copying anything: the batch is order()[*first,
  // *first + rows) of the epoch the call started in. Returns rows. *epoch_ended is set when the
  // call finished the epoch, after which order() already holds the next epoch's permutation
  // (for a data set resident on a device: gather the batch with the old order first, then
  // upload the new one).
  int64_t take(int64_t* first, bool* epoch_ended);
  // The current epoch's visiting order (the identity without shuffling).
  const std::vector<int64_t>& order() const { return m_order; }

  int64_t epoch() const { return m_epoch; }
  int64_t position() const { return m_position; }

  // {"epoch": E, "position": P}
  nlohmann::json state() const;
  // Throws Error{input} unless `state` is an object with exactly the integer keys epoch
  // (0 <= E <= kMaxEpoch) and position (0 <= P < size); on error the cursor is unchanged. A
  // position that leaves no full batch under drop_last (a checkpoint from another batch size)
  // starts epoch E + 1.
  void restore(const nlohmann::json& state);
  // Back to a cursor this loader itself reported (epoch(), position()) earlier in the run, so
  // unchecked; allocates nothing (the permutation is rebuilt in place, and only when the epoch
  // differs). Returns whether order() changed.
  bool rewind(int64_t epoch, int64_t position);

  // Epochs index draw blocks as epoch << 32 | draw (data/random.h).
  static constexpr int64_t kMaxEpoch = (int64_t{1} << 32) - 1;

 private:
  void start_epoch(int64_t epoch);

  const Dataset* m_data;
  int64_t m_batch_size;
  bool m_shuffle;
  bool m_drop_last;
  uint64_t m_seed;
  int64_t m_epoch = 0;
  int64_t m_position = 0;
  std::vector<int64_t> m_order;
};

}  // namespace ampctl::data
