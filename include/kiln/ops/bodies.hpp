// kiln/ops/bodies.hpp: the per-element bodies of the pointwise ops, written once for every
// backend (DESIGN.md decision 5). Each body is generic over the value type V (a scalar in the
// eager backend and in the CPU backend's tails, an xsimd batch in the CPU backend's vectors, a
// thread's value in a CUDA kernel) and over a math library M that supplies the transcendental
// functions and the selects for V:
//
//   struct M {
//     static V exp(V), log(V), sqrt(V), tanh(V), sin(V), cos(V), erf(V), abs(V), pow(V, V);
//     static V floor(V), ceil(V), rint(V), trunc(V);      // rint: to nearest, ties to even
//     static V atan(V), asin(V), acos(V), atan2(V, V), fmod(V, V);  // fmod exact, as C's
//     static auto isnan(V);                    // a mask (bool for scalars)
//     static V select(mask, V a, V b);         // mask ? a : b, lane by lane
//   };
//
// The eager backend instantiates the bodies with the C library's functions on scalars, the CPU
// backend with its vector math library (backend/cpu/simd.hpp): the formula of each op is shared,
// so the reference and the fused kernels cannot drift apart, while the reference still checks the
// vector math against the C library. Nothing here knows xsimd, CUDA or a backend.
#pragma once

#include <numbers>
#include <stdexcept>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/dtype.hpp"
#include "../graph/ops.hpp"

namespace kiln::ops {

/// Integer arithmetic that wraps (two's complement) instead of invoking undefined behaviour.
KILN_HD_TEMPLATE
template <class T, class F>
KILN_ALWAYS_INLINE KILN_HD T wrapping(T a, T b, F f) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(f(static_cast<U>(a), static_cast<U>(b)));
}

/// base^e for integers, wrapping; a negative exponent throws (as PyTorch refuses it).
template <class T>
T integer_pow(T base, T e) {
  if (e < 0) throw std::invalid_argument("kiln: pow: integers to negative integer powers are not allowed");
  T r = 1;
  while (e > 0) {
    if (e & 1) r = wrapping<T>(r, base, [](auto a, auto b) { return a * b; });
    base = wrapping<T>(base, base, [](auto a, auto b) { return a * b; });
    e >>= 1;
  }
  return r;
}

/// C's % for integers (the sign of a); a zero divisor throws, as PyTorch refuses it.
template <class T>
T integer_fmod(T a, T b) {
  if (b == 0) throw std::domain_error("kiln: fmod: integer division by zero");
  return b == T(-1) ? T(0) : static_cast<T>(a % b);  // (the lowest value % -1 overflows)
}

/// C's / for integers (toward zero), the integer quotient that floor_divide rounds; a zero
/// divisor throws, as PyTorch refuses it.
template <class T>
T integer_div(T a, T b) {
  if (b == 0) throw std::domain_error("kiln: floor_divide: integer division by zero");
  return b == T(-1) ? wrapping<T>(0, a, [](auto x, auto y) { return x - y; }) : static_cast<T>(a / b);  // (lowest / -1)
}

/// Whether unary op O has a body for values of type V (integers: neg, abs, relu only; the
/// capture casts integers to f32 for the float functions).
template <op O, class V>
inline constexpr bool has_unary_body =
    !std::is_integral_v<V> || O == op::neg || O == op::abs || O == op::relu;

/// A unary op: every pointwise unary primitive, and the unary composites (sigmoid, silu, gelu,
/// gelu_tanh) that the eager backend computes directly as references for their decompositions.
KILN_HD_TEMPLATE
template <op O, class M, class V>
KILN_ALWAYS_INLINE KILN_HD V unary(const V& x) {
  if constexpr (std::is_integral_v<V>) {
    static_assert(has_unary_body<O, V>, "kiln: a float function of an integer (capture casts to f32 first)");
    if constexpr (O == op::neg) return wrapping<V>(0, x, [](auto a, auto b) { return a - b; });
    else if constexpr (O == op::abs) return x < 0 ? wrapping<V>(0, x, [](auto a, auto b) { return a - b; }) : x;
    else return x < 0 ? V(0) : x;  // relu
  } else {
    const V one(1), half(0.5);
    if constexpr (O == op::neg) return -x;
    else if constexpr (O == op::abs) return M::abs(x);
    else if constexpr (O == op::relu) return M::select(x < V(0), V(0), x);  // NaN stays NaN
    else if constexpr (O == op::exp) return M::exp(x);
    else if constexpr (O == op::log) return M::log(x);
    else if constexpr (O == op::sqrt) return M::sqrt(x);
    else if constexpr (O == op::rsqrt) return one / M::sqrt(x);
    else if constexpr (O == op::reciprocal) return one / x;
    else if constexpr (O == op::tanh) return M::tanh(x);
    else if constexpr (O == op::sin) return M::sin(x);
    else if constexpr (O == op::cos) return M::cos(x);
    else if constexpr (O == op::erf) return M::erf(x);
    else if constexpr (O == op::floor) return M::floor(x);
    else if constexpr (O == op::ceil) return M::ceil(x);
    else if constexpr (O == op::round) return M::rint(x);
    else if constexpr (O == op::trunc) return M::trunc(x);
    else if constexpr (O == op::atan) return M::atan(x);
    else if constexpr (O == op::asin) return M::asin(x);
    else if constexpr (O == op::acos) return M::acos(x);
    else if constexpr (O == op::sigmoid) return one / (one + M::exp(-x));
    else if constexpr (O == op::silu) return x / (one + M::exp(-x));
    else if constexpr (O == op::gelu) return half * x * (one + M::erf(x * V(std::numbers::sqrt2 / 2)));
    else if constexpr (O == op::gelu_tanh)
      return half * x * (one + M::tanh(V(0.7978845608028654) * (x + V(0.044715) * x * x * x)));
    else static_assert(O == op::exp, "kiln: not a unary op with a body (a composite is decomposed first)");
  }
}

/// Whether binary arithmetic op O has a body for values of type V.
template <op O, class V>
inline constexpr bool has_binary_body =
    std::is_same_v<V, bool> ? (O == op::max || O == op::min)
    : std::is_integral_v<V> ? (O == op::add || O == op::sub || O == op::mul || O == op::div || O == op::max || O == op::min ||
                               O == op::pow || O == op::fmod)
                            : (O == op::add || O == op::sub || O == op::mul || O == op::div || O == op::max || O == op::min ||
                               O == op::pow || O == op::fmod || O == op::atan2);

/// A binary arithmetic op (not a comparison). Integers wrap, and divide toward zero (only
/// floor_divide builds an integer div: `/` divides in f32, as PyTorch's); max and min give NaN if either operand is NaN, else the
/// larger (smaller), the first operand on ties.
KILN_HD_TEMPLATE
template <op O, class M, class V>
KILN_ALWAYS_INLINE KILN_HD V binary(const V& a, const V& b) {
  if constexpr (std::is_same_v<V, bool>) {
    static_assert(O == op::max || O == op::min, "kiln: bool arithmetic other than max/min");
    if constexpr (O == op::max) return a || b;
    else return a && b;
  } else if constexpr (std::is_integral_v<V>) {
    if constexpr (O == op::add) return wrapping(a, b, [](auto x, auto y) { return x + y; });
    else if constexpr (O == op::sub) return wrapping(a, b, [](auto x, auto y) { return x - y; });
    else if constexpr (O == op::mul) return wrapping(a, b, [](auto x, auto y) { return x * y; });
    else if constexpr (O == op::max) return a < b ? b : a;
    else if constexpr (O == op::min) return b < a ? b : a;
    else if constexpr (O == op::pow) return integer_pow(a, b);
    else if constexpr (O == op::fmod) return integer_fmod(a, b);
    else if constexpr (O == op::div) return integer_div(a, b);
    else static_assert(O == op::add, "kiln: not a binary op");
  } else {
    if constexpr (O == op::add) return a + b;
    else if constexpr (O == op::sub) return a - b;
    else if constexpr (O == op::mul) return a * b;
    else if constexpr (O == op::div) return a / b;
    else if constexpr (O == op::max || O == op::min) {
      const V pick = O == op::max ? M::select(a < b, b, a) : M::select(b < a, b, a);
      if constexpr (std::is_arithmetic_v<V>) return M::isnan(a) || M::isnan(b) ? a + b : pick;  // a + b: a NaN
      else return M::select(M::isnan(a) | M::isnan(b), a + b, pick);
    } else if constexpr (O == op::pow) return M::pow(a, b);
    else if constexpr (O == op::fmod) return M::fmod(a, b);
    else if constexpr (O == op::atan2) return M::atan2(a, b);
    else static_assert(O == op::add, "kiln: not a binary op");
  }
}

/// A comparison op: a mask of V's lanes (bool for scalars). ne is the unordered not-equal of
/// IEEE and C++ (NaN != x is true), which is !(a == b) for batches too.
KILN_HD_TEMPLATE
template <op O, class V>
KILN_ALWAYS_INLINE KILN_HD auto compare(const V& a, const V& b) {
  if constexpr (O == op::eq) return a == b;
  else if constexpr (O == op::ne) return !(a == b);  // (xsimd's != is the ordered one)
  else if constexpr (O == op::lt) return a < b;
  else if constexpr (O == op::le) return a <= b;
  else if constexpr (O == op::gt) return a > b;
  else return a >= b;
}

/// The order of argsort (and so of sort and topk): whether a goes before b, ascending or
/// descending, NaN above every number (as PyTorch sorts it); equal values are left in order
/// by the caller's stable sort.
template <dtype D>
constexpr bool sorts_before(compute_t<D> a, compute_t<D> b, bool descending) {
  if constexpr (is_floating(D)) {
    const bool an = a != a, bn = b != b;  // (NaN, without <cmath>)
    if (an || bn) return descending ? an && !bn : !an && bn;
  }
  return descending ? b < a : a < b;
}

}  // namespace kiln::ops
