// dtypes, promotion, bfloat16 rounding, static and dynamic shapes, broadcasting.
#include "support.hpp"

using namespace kiln;

TEST_CASE("dtype promotion follows PyTorch's order") {
  static_assert(promote(i32, f32) == f32);
  static_assert(promote(boolean, i32) == i32);
  static_assert(promote(i64, bf16) == bf16);
  static_assert(promote(bf16, f32) == f32);
  static_assert(promote(f64, f32) == f64);
  static_assert(promote_with_scalar(f32, true) == f32);   // x_f32 * 2.0 stays f32
  static_assert(promote_with_scalar(bf16, true) == bf16);
  static_assert(promote_with_scalar(i32, true) == f32);   // x_i32 * 2.5 becomes f32
  static_assert(promote_with_scalar(i32, false) == i32);  // x_i32 * 2 stays i32
  static_assert(promote_with_scalar(boolean, false) == i64);
  static_assert(float_result(i64) == f32 && float_result(f64) == f64);
  static_assert(std::is_same_v<storage_t<bf16>, bfloat16> && std::is_same_v<compute_t<bf16>, float>);
  static_assert(dtype_of<double> == f64 && dtype_of<bool> == boolean && dtype_of<std::int64_t> == i64);
  CHECK(name(bf16) == "bf16");
  CHECK(size_of(bf16) == 2);
  CHECK(size_of(f64) == 8);
}

TEST_CASE("bfloat16 rounds to nearest even and keeps NaN and infinities") {
  CHECK(float(bfloat16(1.0f)) == 1.0f);
  CHECK(bfloat16(1.0f).bits == 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0)
  CHECK(float(bfloat16(1.0f + 0x1p-8f)) == 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6)
  CHECK(float(bfloat16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);
  // just above a halfway point rounds up
  CHECK(float(bfloat16(1.0f + 0x1p-8f + 0x1p-20f)) == 1.0f + 0x1p-7f);
  CHECK(float(bfloat16(-2.5f)) == -2.5f);
  CHECK(std::isnan(float(bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(float(bfloat16(std::numeric_limits<float>::infinity()))));
  // the largest float rounds to infinity in bf16 (it is above bf16's max + half ulp)
  CHECK(std::isinf(float(bfloat16(std::numeric_limits<float>::max()))));
  // every bf16 value converts to float and back exactly
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const bfloat16 x = bfloat16::from_bits(static_cast<std::uint16_t>(b));
    const float f = x;
    if (std::isnan(f)) continue;
    REQUIRE(bfloat16(f).bits == x.bits);
  }
}

TEST_CASE("static shapes broadcast at compile time, NumPy rules") {
  constexpr dims a{3, 1, 4}, b{5, 1};
  constexpr broadcast_result r = broadcast(a, b);
  static_assert(r.ok && r.shape == dims{3, 5, 4});
  static_assert(!broadcast(dims{3, 4}, dims{5}).ok);
  static_assert(broadcast(dims{}, dims{2, 2}).shape == dims{2, 2});  // rank-0 scalars broadcast
  // dynamic extents: dyn meets 5 -> 5 (checked at run time), dyn meets dyn -> dyn
  static_assert(broadcast(dims{dyn, 784}, dims{784}).shape == dims{dyn, 784});
  static_assert(broadcast(dims{dyn, 3}, dims{5, 3}).shape == dims{5, 3});
  static_assert(broadcast(dims{dyn}, dims{dyn}).shape == dims{dyn});
  static_assert(broadcastable_to(dims{3, 1}, dims{2, 3, 4}));
  static_assert(!broadcastable_to(dims{2, 3}, dims{4, 3}));
  static_assert(shape<dyn, 784>::value == dims{dyn, 784});
  static_assert(std::is_same_v<as_shape<dims{3, 4}>, shape<3, 4>>);
  CHECK(to_string(dims{2, dyn, 3}) == "[2, dyn, 3]");
  CHECK(to_string(dims{}) == "[]");
}

TEST_CASE("shape rules for reductions, matmul, reshape, permute, slice, concat") {
  static_assert(reduce_shape(dims{2, 3, 4}, 0b010, false).shape == dims{2, 4});
  static_assert(reduce_shape(dims{2, 3, 4}, 0b101, true).shape == dims{1, 3, 1});
  static_assert(!reduce_shape(dims{2, 3}, 0b100, false).ok);
  static_assert(matmul_shape(dims{7, 1, 2, 3}, dims{5, 3, 4}).shape == dims{7, 5, 2, 4});
  static_assert(!matmul_shape(dims{2, 3}, dims{4, 5}).ok);
  static_assert(matmul_shape(dims{dyn, 3}, dims{3, 4}).shape == dims{dyn, 4});
  static_assert(reshape_shape(dims{3, 4}, dims{dyn, 2}).shape == dims{6, 2});
  static_assert(!reshape_shape(dims{3, 4}, dims{5, dyn}).ok);
  static_assert(reshape_shape(dims{dyn, 4}, dims{dyn, 2}).shape == dims{dyn, 2});
  constexpr std::int8_t p[] = {2, 0, 1};
  static_assert(permute_shape(dims{2, 3, 4}, p, 3).shape == dims{4, 2, 3});
  static_assert(slice_shape(dims{10}, 0, 2, 9, 3).shape == dims{3});  // 2, 5, 8
  static_assert(slice_shape(dims{10}, 0, -3, to_end, 1).shape == dims{3});
  static_assert(!slice_shape(dims{10}, 0, 4, 11, 1).ok);
  static_assert(!slice_shape(dims{10}, 0, 5, 4, 1).ok);
  static_assert(slice_shape(dims{dyn}, 0, 1, 5, 2).shape == dims{2});
  static_assert(concat_shape(dims{2, 3}, dims{2, 5}, 1).shape == dims{2, 8});
  static_assert(!concat_shape(dims{2, 3}, dims{3, 5}, 1).ok);
}
