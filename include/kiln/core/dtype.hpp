// kiln/core/dtype.hpp: element types, their C++ representations and the promotion rules.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

#include "config.hpp"

namespace kiln {

/// bfloat16 storage: the top 16 bits of an IEEE binary32. Arithmetic happens in float;
/// conversion from float rounds to nearest even and keeps NaNs quiet.
struct bfloat16 {
  std::uint16_t bits = 0;

  constexpr bfloat16() = default;
  KILN_HD constexpr bfloat16(float f) : bits(round(f)) {}  // NOLINT: implicit like a float
  KILN_HD constexpr operator float() const {               // NOLINT: implicit like a float
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  }
  static constexpr bfloat16 from_bits(std::uint16_t b) {
    bfloat16 r;
    r.bits = b;
    return r;
  }

 private:
  KILN_HD static constexpr std::uint16_t round(float f) {
    const auto u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
      return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
    const std::uint32_t lsb = (u >> 16) & 1u;
    return static_cast<std::uint16_t>((u + 0x7fffu + lsb) >> 16);
  }
};

/// Element types, ordered by promotion rank: a binary op on two dtypes yields the larger one
/// (as in PyTorch: bool < int32 < int64 < bfloat16 < float32 < float64).
enum class dtype : std::uint8_t { boolean, i32, i64, bf16, f32, f64 };

inline constexpr dtype boolean = dtype::boolean;
inline constexpr dtype i32 = dtype::i32;
inline constexpr dtype i64 = dtype::i64;
inline constexpr dtype bf16 = dtype::bf16;
inline constexpr dtype f32 = dtype::f32;
inline constexpr dtype f64 = dtype::f64;

constexpr bool is_floating(dtype d) { return d >= dtype::bf16; }
constexpr bool is_integral(dtype d) { return d == dtype::i32 || d == dtype::i64; }

constexpr dtype promote(dtype a, dtype b) { return a < b ? b : a; }

/// The dtype a tensor of dtype `t` keeps when combined with a C++ scalar ("weak" scalars, as in
/// PyTorch: `x_f32 * 2.0` stays f32, `x_i32 * 2.5` becomes f32, `x_bool + 1` becomes i64).
constexpr dtype promote_with_scalar(dtype t, bool scalar_is_floating) {
  if (scalar_is_floating) return is_floating(t) ? t : dtype::f32;
  return t == dtype::boolean ? dtype::i64 : t;
}

/// Float ops (exp, tanh, /, mean ...) on integers compute in f32, as in PyTorch.
constexpr dtype float_result(dtype d) { return is_floating(d) ? d : dtype::f32; }

constexpr std::string_view name(dtype d) {
  switch (d) {
    case dtype::boolean: return "bool";
    case dtype::i32: return "i32";
    case dtype::i64: return "i64";
    case dtype::bf16: return "bf16";
    case dtype::f32: return "f32";
    case dtype::f64: return "f64";
  }
  return "?";
}

constexpr std::size_t size_of(dtype d) {
  switch (d) {
    case dtype::boolean: return 1;
    case dtype::i32: return 4;
    case dtype::i64: return 8;
    case dtype::bf16: return 2;
    case dtype::f32: return 4;
    case dtype::f64: return 8;
  }
  return 0;
}

namespace detail {
template <dtype D> struct storage_of;
template <> struct storage_of<dtype::boolean> { using type = bool; };
template <> struct storage_of<dtype::i32> { using type = std::int32_t; };
template <> struct storage_of<dtype::i64> { using type = std::int64_t; };
template <> struct storage_of<dtype::bf16> { using type = bfloat16; };
template <> struct storage_of<dtype::f32> { using type = float; };
template <> struct storage_of<dtype::f64> { using type = double; };
}  // namespace detail

/// The C++ type that stores one element of dtype D.
template <dtype D> using storage_t = typename detail::storage_of<D>::type;

/// The C++ type in which arithmetic on dtype D happens (bf16 computes in float).
template <dtype D> using compute_t = std::conditional_t<D == dtype::bf16, float, storage_t<D>>;

template <class T> inline constexpr bool is_element_v =
    std::is_same_v<T, bool> || std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> ||
    std::is_same_v<T, bfloat16> || std::is_same_v<T, float> || std::is_same_v<T, double>;

template <class T> requires is_element_v<T>
inline constexpr dtype dtype_of = std::is_same_v<T, bool>           ? dtype::boolean
                                  : std::is_same_v<T, std::int32_t> ? dtype::i32
                                  : std::is_same_v<T, std::int64_t> ? dtype::i64
                                  : std::is_same_v<T, bfloat16>     ? dtype::bf16
                                  : std::is_same_v<T, float>        ? dtype::f32
                                                                    : dtype::f64;

/// Calls f.template operator()<D>() with the run-time dtype d as a compile-time constant.
template <class F>
decltype(auto) visit(dtype d, F&& f) {
  switch (d) {
    case dtype::boolean: return f.template operator()<dtype::boolean>();
    case dtype::i32: return f.template operator()<dtype::i32>();
    case dtype::i64: return f.template operator()<dtype::i64>();
    case dtype::bf16: return f.template operator()<dtype::bf16>();
    case dtype::f32: return f.template operator()<dtype::f32>();
    case dtype::f64: break;
  }
  return f.template operator()<dtype::f64>();
}

}  // namespace kiln
