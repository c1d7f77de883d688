// Tensor, Storage, FlatLayout and the dtype helpers (core/tensor.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ampctl/core/error.h"
#include "ampctl/core/tensor.h"

namespace ampctl {
namespace {

// Runs `f`, expects it to throw ampctl::Error of `kind`, and returns the message.
std::string expect_error(const std::function<void()>& f, ErrorKind kind) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << "got " << to_string(e.kind()) << ": " << e.what();
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-ampctl exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw; expected ampctl::Error of kind " << to_string(kind);
  return {};
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(DType, SizesNamesAndParseRoundTrip) {
  const struct {
    DType dtype;
    size_t size;
    const char* name;
    bool floating;
  } cases[] = {{DType::f32, 4, "f32", true},
               {DType::f16, 2, "f16", true},
               {DType::bf16, 2, "bf16", true},
               {DType::i32, 4, "i32", false}};
  for (const auto& c : cases) {
    EXPECT_EQ(dtype_size(c.dtype), c.size) << c.name;
    EXPECT_STREQ(dtype_name(c.dtype), c.name);
    EXPECT_EQ(is_floating(c.dtype), c.floating) << c.name;
    EXPECT_EQ(parse_dtype(c.name, "test"), c.dtype) << c.name;
  }
  EXPECT_EQ(dtype_size(DTypeOf<half>::value), sizeof(half));
  EXPECT_EQ(dtype_size(DTypeOf<bfloat16>::value), sizeof(bfloat16));
  EXPECT_EQ(dtype_size(DTypeOf<float>::value), sizeof(float));
  EXPECT_EQ(dtype_size(DTypeOf<int32_t>::value), sizeof(int32_t));
}

TEST(DType, ParseRejectsUnknownNamesWithInputError) {
  for (const char* bad : {"fp16", "F16", "float32", "", "f16 ", "bfloat16"}) {
    try {
      parse_dtype(bad, "model.dtype");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input) << bad;
      // The message names the key and the bad value; the hint lists the valid names.
      EXPECT_TRUE(contains(e.what(), "model.dtype")) << e.what();
      EXPECT_TRUE(contains(e.what(), std::string("'") + bad + "'")) << e.what();
      EXPECT_TRUE(contains(e.hint(), "bf16")) << e.hint();
    }
  }
}

TEST(Shape, NumelAndString) {
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({0}), 0);
  EXPECT_EQ(shape_numel({256, 32}), 256 * 32);
  EXPECT_EQ(shape_str({256, 32}), "[256, 32]");
  EXPECT_EQ(shape_str({}), "[]");
  expect_error([] { shape_numel({3, -1}); }, ErrorKind::invalid_argument);
}

TEST(Device, Names) {
  EXPECT_EQ(Device{}.str(), "cpu");
  EXPECT_EQ((Device{DeviceType::cuda, 1}.str()), "cuda:1");
}

TEST(Tensor, HostTensorIsZeroedAlignedAndDescribed) {
  const Tensor t = Tensor::host({256, 32}, DType::f16);
  ASSERT_TRUE(t.defined());
  EXPECT_TRUE(t.is_cpu());
  EXPECT_EQ(t.rank(), 2u);
  EXPECT_EQ(t.dim(0), 256);
  EXPECT_EQ(t.dim(1), 32);
  EXPECT_EQ(t.numel(), 256u * 32u);
  EXPECT_EQ(t.nbytes(), 256u * 32u * 2u);
  EXPECT_EQ(t.describe(), "f16[256, 32] on cpu");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u) << "host storage is 64-byte aligned";
  const half* p = t.data_as<half>();
  for (size_t i = 0; i < t.numel(); ++i) ASSERT_EQ(p[i].bits, 0) << "element " << i;
}

TEST(Tensor, UndefinedTensorRejectsDataAccess) {
  const Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(t.numel(), 0u);
  expect_error([&] { (void)t.data(); }, ErrorKind::invalid_argument);
}

TEST(Tensor, ViewsShareStorageAtTheRightOffsets) {
  const Tensor t = Tensor::host({10, 4}, DType::f32);
  float* base = t.data_as<float>();
  for (size_t i = 0; i < t.numel(); ++i) base[i] = static_cast<float>(i);

  const Tensor row = t.view(8, {2, 4});
  EXPECT_TRUE(row.shares_storage_with(t));
  EXPECT_EQ(row.data_as<float>(), base + 8);
  EXPECT_EQ(row.shape(), (Shape{2, 4}));
  EXPECT_EQ(row.data_as<float>()[3], 11.0f);

  // A view of a view adds the offsets.
  const Tensor inner = row.view(5, {3});
  EXPECT_EQ(inner.data_as<float>(), base + 13);
  inner.data_as<float>()[0] = -1.0f;
  EXPECT_EQ(base[13], -1.0f) << "writes through a view reach the parent";

  // A view exactly at the end is fine; one element further is not.
  EXPECT_EQ(t.view(36, {4}).data_as<float>(), base + 36);
  EXPECT_EQ(t.view(40, {0}).numel(), 0u);

  // Offsets are in elements of the tensor's dtype.
  const Tensor h = Tensor::host({16}, DType::bf16);
  EXPECT_EQ(static_cast<char*>(h.view(3, {2}).data()) - static_cast<char*>(h.data()), 6);
}

TEST(Tensor, ViewOutOfRangeThrowsInvalidArgument) {
  const Tensor t = Tensor::host({10, 4}, DType::f32);
  const std::string message = expect_error([&] { t.view(37, {4}); }, ErrorKind::invalid_argument);
  EXPECT_TRUE(contains(message, "[4]") && contains(message, "37")) << message;
  expect_error([&] { t.view(0, {41}); }, ErrorKind::invalid_argument);
  expect_error([&] { t.view(41, {0}); }, ErrorKind::invalid_argument);
  expect_error([&] { t.view(0, {2, -3}); }, ErrorKind::invalid_argument);
}

TEST(Tensor, ConstructorRejectsAViewPastItsStorage) {
  auto storage = allocate_host_storage(64);
  EXPECT_EQ(Tensor(storage, 32, {8}, DType::f32).numel(), 8u);
  expect_error([&] { Tensor(storage, 36, {8}, DType::f32); }, ErrorKind::invalid_argument);
}

TEST(Tensor, ReshapeChecksNumelAndSharesStorage) {
  const Tensor t = Tensor::host({6, 4}, DType::bf16);
  const Tensor r = t.reshape({2, 3, 4});
  EXPECT_TRUE(r.shares_storage_with(t));
  EXPECT_EQ(r.data(), t.data());
  EXPECT_EQ(r.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(r.dtype(), DType::bf16);
  const Tensor flat = t.view(4, {2, 4}).flatten();
  EXPECT_EQ(flat.shape(), (Shape{8}));
  EXPECT_EQ(flat.data(), t.view(4, {8}).data());
  const std::string message = expect_error([&] { t.reshape({5, 5}); }, ErrorKind::invalid_argument);
  EXPECT_TRUE(contains(message, "[5, 5]")) << message;
  expect_error([&] { t.reshape({25}); }, ErrorKind::invalid_argument);
}

TEST(Tensor, CheckDtypeNamesBothDtypes) {
  const Tensor t = Tensor::host({3}, DType::f16);
  t.check_dtype(DType::f16);
  const std::string message =
      expect_error([&] { t.check_dtype(DType::f32); }, ErrorKind::invalid_argument);
  EXPECT_TRUE(contains(message, "f32") && contains(message, "f16[3]")) << message;
  expect_error([&] { (void)t.data_as<float>(); }, ErrorKind::invalid_argument);
  expect_error([&] { (void)t.data_as<bfloat16>(); }, ErrorKind::invalid_argument);
  EXPECT_EQ(t.data_as<half>(), t.data());
}

TEST(FlatLayout, AlignsEveryEntryToSixteenElements) {
  FlatLayout layout;
  EXPECT_EQ(layout.add("a", {3}), 0u);
  EXPECT_EQ(layout.add("b", {16}), 16u);
  EXPECT_EQ(layout.add("c", {5, 2}), 32u);
  EXPECT_EQ(layout.add("d", {1}), 48u);
  EXPECT_EQ(layout.total(), 49u);
  ASSERT_EQ(layout.entries().size(), 4u);
  EXPECT_EQ(layout.entries()[2].name, "c");
  EXPECT_EQ(layout.entries()[2].shape, (Shape{5, 2}));
  EXPECT_EQ(layout.entries()[2].numel, 10u);
}

TEST(FlatLayout, RandomLayoutsPackTightlyAndAligned) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 200; ++trial) {
    FlatLayout layout;
    const int count = 1 + static_cast<int>(rng() % 20);
    for (int i = 0; i < count; ++i) {
      Shape shape;
      for (uint32_t d = 0, rank = rng() % 3 + 1; d < rank; ++d) {
        shape.push_back(static_cast<int64_t>(rng() % 40 + 1));
      }
      layout.add(std::string("p").append(std::to_string(i)), shape);
    }
    size_t end = 0;
    for (const FlatLayout::Entry& e : layout.entries()) {
      ASSERT_EQ(e.offset % FlatLayout::kAlignElements, 0u) << e.name << ", trial " << trial;
      // The next aligned offset after the previous entry: no overlap, no wasted 16-block.
      ASSERT_GE(e.offset, end) << e.name << ", trial " << trial;
      ASSERT_LT(e.offset - end, FlatLayout::kAlignElements) << e.name << ", trial " << trial;
      ASSERT_EQ(e.numel, static_cast<size_t>(shape_numel(e.shape)));
      end = e.offset + e.numel;
    }
    ASSERT_EQ(layout.total(), end) << "trial " << trial;
  }
}

TEST(FlatLayout, ViewsShareTheFlatBufferAndCheckItsSize) {
  FlatLayout layout;
  layout.add("w", {4, 3});
  layout.add("b", {3});
  const Tensor flat = Tensor::host({static_cast<int64_t>(layout.total())}, DType::f16);
  const std::vector<Tensor> views = layout.views(flat);
  ASSERT_EQ(views.size(), 2u);
  const half* base = flat.data_as<half>();
  for (size_t i = 0; i < views.size(); ++i) {
    EXPECT_TRUE(views[i].shares_storage_with(flat));
    EXPECT_EQ(views[i].shape(), layout.entries()[i].shape);
    EXPECT_EQ(views[i].dtype(), DType::f16);
    EXPECT_EQ(views[i].data_as<half>(), base + layout.entries()[i].offset);
  }
  const Tensor too_small = Tensor::host({static_cast<int64_t>(layout.total() - 1)}, DType::f16);
  expect_error([&] { layout.views(too_small); }, ErrorKind::invalid_argument);
}

}  // namespace
}  // namespace ampctl
