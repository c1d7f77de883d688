#include "ampctl/train/batcher.h"

#include <algorithm>
#include <memory>

#include "ampctl/backend/backend.h"
#include "ampctl/core/error.h"
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
    m_eval_sets.push_back(resident(b, *data.eval));
    for (const data::Dataset& more : data.more_eval) m_eval_sets.push_back(resident(b, more));
    select_eval(0);
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

void DeviceBatcher::select_eval(size_t set) {
  m_eval = m_eval_sets.at(set);
  m_eval_total = m_eval.x.shape()[0];
  shard_eval();
}

void DeviceBatcher::set_shard(int rank, int world) {
  m_rank = rank;
  m_world = world;
  shard_eval();
}

void DeviceBatcher::shard_eval() {
  const int rank = m_rank, world = m_world;
  const int64_t base = m_eval_total / world, extra = m_eval_total % world;
  m_eval_first = rank * base + std::min<int64_t>(rank, extra);
  m_eval_rows = base + (rank < extra ? 1 : 0);
}

const Batch& DeviceBatcher::next() {
  Backend& b = *m_backend;
  int64_t first = 0;
  bool epoch_ended = false;
  const int64_t global_rows = m_loader->take(&first, &epoch_ended);
  // This rank's shard of the global batch (the whole of it with one rank).
  const int64_t base = global_rows / m_world, extra = global_rows % m_world;
  first += m_rank * base + std::min<int64_t>(m_rank, extra);
  const int64_t rows = base + (m_rank < extra ? 1 : 0);
  m_current.rows = rows;
  m_current.global_rows = global_rows;
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

Batch DeviceBatcher::eval_batch(int64_t local_first) {
  const int64_t first = m_eval_first + local_first;
  Batch out;
  out.rows = std::min(m_batch, m_eval_rows - local_first);
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

Batcher::Cursor DeviceBatcher::cursor() const {
  return {m_loader->epoch(), m_loader->position()};
}

void DeviceBatcher::rewind(Cursor cursor) {
  // Inside a step (a retry): no allocation, and the order is uploaded again only when the step
  // crossed an epoch boundary.
  if (m_loader->rewind(cursor.a, cursor.b)) upload_order();
}

// ---- LmBatcher ----

namespace {

// A token array on the backend: on the CPU a view of the host vector (it outlives the batcher).
Tensor resident_tokens(Backend& b, const std::vector<int32_t>& tokens) {
  const Shape shape{static_cast<int64_t>(tokens.size())};
  if (b.device().type == DeviceType::cpu) {
    return Tensor{std::make_shared<Storage>(const_cast<int32_t*>(tokens.data()),
                                            tokens.size() * sizeof(int32_t), Device{}, nullptr),
                  0, shape, DType::i32};
  }
  return b.from_host(shape, DType::i32, tokens.data());
}

}  // namespace

LmBatcher::LmBatcher(Backend& backend, const data::LmData& data, int64_t batch_size,
                     int64_t block_size, int64_t eval_batches, uint64_t seed, int rank, int world)
    : m_backend(&backend),
      m_batch(batch_size),
      m_block(block_size),
      m_eval_batches(eval_batches),
      m_seed(seed),
      m_rank(rank),
      m_world(world) {
  Backend& b = backend;
  if (batch_size < 1 || block_size < 1 || eval_batches < 1) {
    throw Error{ErrorKind::invalid_argument, "LmBatcher: batch, block and eval sizes must be >= 1"};
  }
  if (world < 1 || rank < 0 || rank >= world) {
    throw Error{ErrorKind::invalid_argument, "LmBatcher: rank outside [0, world)"};
  }
  const int64_t bt = batch_size * block_size;
  m_train_n = data.train.size();
  if (m_train_n <= block_size) {
    throw Error{ErrorKind::invalid_argument, "LmBatcher: fewer than block_size + 1 tokens"};
  }
  m_train = resident_tokens(b, data.train.tokens);
  m_train_next = m_train.view(1, {m_train_n - 1});
  m_index_host.resize(static_cast<size_t>(bt));
  m_index_dev = b.empty({bt}, DType::i32);
  m_input = b.empty({batch_size, block_size}, DType::i32);
  m_target = b.empty({bt}, DType::i32);
  if (data.eval) {
    std::vector<const data::TokenSet*> sets{&*data.eval};
    for (const data::TokenSet& more : data.more_eval) sets.push_back(&more);
    for (const data::TokenSet* set : sets) {
      EvalStream s;
      s.n = set->size();
      if (s.n <= block_size) {
        throw Error{ErrorKind::invalid_argument, "LmBatcher: eval set shorter than one window"};
      }
      s.tokens = resident_tokens(b, set->tokens);
      s.next = s.tokens.view(1, {s.n - 1});
      // The evaluation windows are fixed: computed and uploaded once (each set's over its own
      // length, as a run with that set alone draws them).
      std::vector<int32_t> all(static_cast<size_t>(eval_batches * bt));
      for (int64_t j = 0; j < eval_batches; ++j) {
        data::window_indices(seed, /*eval=*/true, j, batch_size * world, s.n, block_size,
                             std::span<int32_t>(all.data() + j * bt, static_cast<size_t>(bt)),
                             rank * batch_size);
      }
      s.index = b.from_host({eval_batches * bt}, DType::i32, all.data());
      m_eval_streams.push_back(std::move(s));
    }
    m_eval_input = b.empty({batch_size, block_size}, DType::i32);
    m_eval_target = b.empty({bt}, DType::i32);
    select_eval(0);
  }
}

const Batch& LmBatcher::next() {
  Backend& b = *m_backend;
  const int64_t bt = m_batch * m_block;
  data::window_indices(m_seed, /*eval=*/false, m_drawn, m_batch * m_world, m_train_n, m_block,
                       m_index_host, m_rank * m_batch);
  ++m_drawn;
  b.upload(m_index_dev, m_index_host.data(), m_index_dev.nbytes());
  b.gather_rows(m_train, m_index_dev, 0, m_input.view(0, {bt}));
  b.gather_rows(m_train_next, m_index_dev, 0, m_target);
  m_current.input = m_input;
  m_current.target = m_target;
  m_current.rows = m_batch;
  m_current.global_rows = m_batch * m_world;
  return m_current;
}

void LmBatcher::select_eval(size_t set) {
  const EvalStream& s = m_eval_streams.at(set);
  m_eval = s.tokens;
  m_eval_next = s.next;
  m_eval_index = s.index;
  m_eval_n = s.n;
}

Batch LmBatcher::eval_batch(int64_t first) {
  Backend& b = *m_backend;
  const int64_t bt = m_batch * m_block;
  const int64_t j = first / m_batch;
  b.gather_rows(m_eval, m_eval_index, j * bt, m_eval_input.view(0, {bt}));
  b.gather_rows(m_eval_next, m_eval_index, j * bt, m_eval_target);
  Batch out;
  out.input = m_eval_input;
  out.target = m_eval_target;
  out.rows = m_batch;
  return out;
}

nlohmann::json LmBatcher::state() const {
  return nlohmann::json{{"batches", m_drawn}};
}

void LmBatcher::restore(const nlohmann::json& state) {
  if (!state.is_object() || state.size() != 1 || !state.contains("batches") ||
      !state.at("batches").is_number_integer() || state.at("batches").get<int64_t>() < 0) {
    throw Error{
        ErrorKind::input,
        "data cursor: a language model's must be {\"batches\": N >= 0}, got " + state.dump(),
        "the checkpoint was not written for text or token data"};
  }
  m_drawn = state.at("batches").get<int64_t>();
}

}  // namespace ampctl::train
