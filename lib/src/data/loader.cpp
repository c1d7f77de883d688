#include "ampctl/data/loader.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>

#include "ampctl/core/error.h"
#include "ampctl/data/random.h"

namespace ampctl::data {

DataLoader::DataLoader(const Dataset& data, int64_t batch_size, bool shuffle, bool drop_last,
                       uint64_t seed)
    : m_data(&data),
      m_batch_size(batch_size),
      m_shuffle(shuffle),
      m_drop_last(drop_last),
      m_seed(seed) {
  const int64_t n = data.size();
  if (batch_size < 1) {
    throw Error{ErrorKind::invalid_argument,
                "DataLoader: batch_size must be >= 1, got " + std::to_string(batch_size)};
  }
  if (n < 1) {
    throw Error{ErrorKind::invalid_argument, "DataLoader: " + data.origin + " has no samples"};
  }
  if (drop_last && batch_size > n) {
    throw Error{ErrorKind::config,
                "data.batch_size (" + std::to_string(batch_size) + ") is larger than the " +
                    std::to_string(n) + " samples of " + data.origin +
                    " while data.drop_last is true: no batch would be left",
                "lower data.batch_size or set data.drop_last: false"};
  }
  m_order.resize(static_cast<size_t>(n));
  std::iota(m_order.begin(), m_order.end(), int64_t{0});  // the order when not shuffling
  start_epoch(0);
}

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = m_data->size();
  return m_drop_last ? n / m_batch_size : (n + m_batch_size - 1) / m_batch_size;
}

int64_t DataLoader::next_batch_rows() const {
  return std::min(m_batch_size, m_data->size() - m_position);
}

void DataLoader::start_epoch(int64_t epoch) {
  m_epoch = epoch;
  m_position = 0;
  if (m_shuffle) epoch_permutation(m_seed, epoch, m_order);
}

int64_t DataLoader::take(int64_t* first, bool* epoch_ended) {
  const int64_t rows = next_batch_rows();
  const int64_t n = m_data->size();
  const int64_t after = m_position + rows;
  const bool epoch_ends = m_drop_last ? after + m_batch_size > n : after >= n;
  if (epoch_ends && m_epoch == kMaxEpoch) {
    throw Error{ErrorKind::runtime, "data loader: epoch " + std::to_string(kMaxEpoch) +
                                        " is the last one (the shuffle's draw index is spent)"};
  }
  *first = m_position;
  *epoch_ended = epoch_ends;
  m_position = after;
  if (epoch_ends) start_epoch(m_epoch + 1);
  return rows;
}

int64_t DataLoader::next(float* x, int32_t* labels, float* y) {
  const int64_t rows = next_batch_rows();
  // Gather before take(): at an epoch's end take() rewrites the order with the next epoch's.
  gather(*m_data, m_order.data() + m_position, rows, x, labels, y);
  int64_t first = 0;
  bool ended = false;
  take(&first, &ended);
  return rows;
}

nlohmann::json DataLoader::state() const {
  return nlohmann::json{{"epoch", m_epoch}, {"position", m_position}};
}

namespace {

int64_t read_cursor_field(const nlohmann::json& state, const char* key, int64_t max) {
  const std::string where = std::string("data loader state: '") + key + "'";
  const auto it = state.find(key);
  if (it == state.end()) throw Error{ErrorKind::input, where + " is missing"};
  if (!it->is_number_integer()) {
    throw Error{ErrorKind::input, where + " must be an integer, got " + it->dump()};
  }
  const int64_t value =
      it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
          ? INT64_MAX
          : it->get<int64_t>();
  if (value < 0 || value > max) {
    throw Error{ErrorKind::input,
                where + " must be in [0, " + std::to_string(max) + "], got " + it->dump()};
  }
  return value;
}

}  // namespace

void DataLoader::restore(const nlohmann::json& state) {
  if (!state.is_object()) {
    throw Error{
        ErrorKind::input,
        "data loader state must be an object {\"epoch\": E, \"position\": P}, got " + state.dump()};
  }
  for (const auto& [key, value] : state.items()) {
    if (key != "epoch" && key != "position") {
      throw Error{ErrorKind::input, "data loader state: unknown key '" + key + "'"};
    }
  }
  int64_t epoch = read_cursor_field(state, "epoch", kMaxEpoch);
  int64_t position = read_cursor_field(state, "position", m_data->size() - 1);
  const int64_t n = m_data->size();
  if (m_drop_last && position + m_batch_size > n) {
    if (epoch == kMaxEpoch) {
      throw Error{ErrorKind::input, "data loader state: epoch " + std::to_string(epoch) +
                                        " has no batch left and is the last epoch"};
    }
    ++epoch;
    position = 0;
  }
  start_epoch(epoch);
  m_position = position;
}

bool DataLoader::rewind(int64_t epoch, int64_t position) {
  const bool changed = epoch != m_epoch;
  if (changed) start_epoch(epoch);
  m_position = position;
  return changed;
}

}  // namespace ampctl::data
