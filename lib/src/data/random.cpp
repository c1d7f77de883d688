#include "ampctl/data/random.h"

#include <numeric>
#include <string>
#include <utility>

#include "ampctl/core/error.h"

namespace ampctl::data {

void seeded_permutation(uint64_t seed, DataStream purpose, uint64_t round,
                        std::span<int64_t> order) {
  const uint64_t n = order.size();
  if (n >> 32 != 0 || round >> 32 != 0) {
    throw Error{ErrorKind::invalid_argument, "seeded_permutation: " + std::to_string(n) +
                                                 " samples, round " + std::to_string(round) +
                                                 " (both must be below 2^32)"};
  }
  std::iota(order.begin(), order.end(), int64_t{0});
  for (uint64_t i = n; i-- > 1;) {
    const uint64_t j = uniform_below(draw_u64(seed, purpose, round << 32 | i), i + 1);
    std::swap(order[i], order[j]);
  }
}

}  // namespace ampctl::data
