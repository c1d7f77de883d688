// Overflow-checked sizes: exact results inside the range, Error naming the size outside it, and
// the tensor sizes built on them (shape_numel, Tensor::host, FlatLayout) refusing a wrap.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "ampctl/core/checked.h"
#include "ampctl/core/input_file.h"
#include "ampctl/core/tensor.h"

namespace ampctl {
namespace {

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

TEST(Checked, ExactInsideTheRange) {
  EXPECT_EQ(checked_mul(int64_t{3037000499}, int64_t{3037000499}, "x"),
            int64_t{9223372030926249001});
  EXPECT_EQ(checked_add(INT64_MAX - 1, int64_t{1}, "x"), INT64_MAX);
  EXPECT_EQ(checked_mul(size_t{1} << 32, size_t{1} << 31, "x"), size_t{1} << 63);
  EXPECT_EQ(checked_mul(int64_t{0}, INT64_MAX, "x"), 0);
}

TEST(Checked, OverflowNamesWhat) {
  EXPECT_EQ(
      message_of([] { checked_mul(int64_t{3037000500}, int64_t{3037000500}, "model.hidden"); }),
      "model.hidden: 3037000500 x 3037000500 overflows a 64-bit size");
  EXPECT_EQ(message_of([] { checked_add(INT64_MAX, int64_t{1}, "sum"); }),
            "sum: 9223372036854775807 + 1 overflows a 64-bit size");
  EXPECT_NE(message_of([] { checked_mul(SIZE_MAX, size_t{2}, "bytes"); }), "");
  EXPECT_NE(message_of([] { checked_mul(int64_t{-1}, int64_t{2}, "negative"); }), "");
  try {
    checked_mul(INT64_MAX, int64_t{2}, "k", ErrorKind::config);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::config);
  }
}

TEST(Checked, TensorSizesRefuseAWrap) {
  // 2^32 x 2^32 elements: the product wraps int64 to 0 without the check.
  EXPECT_NE(message_of([] {
              shape_numel(Shape{int64_t{1} << 32, int64_t{1} << 32});
            }).find("overflows a 64-bit size"),
            std::string::npos);
  // 2^62 elements fit int64, their f32 bytes do not.
  EXPECT_NE(message_of([] {
              Tensor::host(Shape{int64_t{1} << 31, int64_t{1} << 31}, DType::f32);
            }),
            "");
  FlatLayout layout;
  layout.add("a", Shape{4, 4});
  EXPECT_EQ(layout.total(), 16u);
  EXPECT_NE(message_of([&] { layout.add("b", Shape{int64_t{1} << 31, int64_t{1} << 31}); }), "");
  EXPECT_EQ(layout.entries().size(), 1u);  // a refused entry leaves the layout as it was
}

TEST(Checked, FormatBytes) {
  EXPECT_EQ(format_bytes(100), "100 bytes");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(uint64_t{1} << 30), "1.0 GiB");
  EXPECT_NE(host_memory_available().value_or(1), 0u);
}

}  // namespace
}  // namespace ampctl
