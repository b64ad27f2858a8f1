// kiln/graph/expr_derived.hpp: ops a PyTorch user reaches for, with PyTorch's names and
// semantics, written at capture as expressions of kiln's other ops (as PrimTorch writes them).
// They need no row in the op catalogue, no decomposition rule and no backend code: both modes
// of differentiation, fusion and every backend come from their parts, and `explain`, KILN_LOGS
// and DOT show those parts. Each is written so that the branches a `where` does not take stay
// finite (their zero gradient stays zero, not 0 * inf) and so that the edge values (0, -0,
// infinities, NaN) come out as PyTorch's do; tests/conformance checks them against PyTorch.
#pragma once

#include <cstdint>
#include <limits>
#include <numbers>
#include <optional>
#include <utility>

#include "expr.hpp"
#include "expr_nn.hpp"
#include "grad.hpp"

namespace kiln {

namespace ex {
/// 0 .. n-1 (i64) for the extent n of A's axis Axis (op::iota; A's values are not read).
template <int Axis, class A>
struct iota : node_base<A> {
  static constexpr dtype dt = dtype::i64;
  static constexpr dims shape = A::shape.poisoned() ? dims::poison() : dims{A::shape.e[Axis]};
  static constexpr node make() {
    node n = detail::make_node(op::iota, dt, shape);
    n.axis = Axis;
    return n;
  }
};
}  // namespace ex

namespace detail {
template <class X> using expr_t = decltype(as_expr(std::declval<const X&>()));
inline constexpr double inf = std::numeric_limits<double>::infinity();

constexpr int normal_axis(int axis, int rank) { return axis < 0 ? axis + rank : axis; }

/// x reshaped to the shape S (a dims value), through reshape<...>.
template <dims S, class X, std::size_t... I>
constexpr auto reshape_dims(const X& x, std::index_sequence<I...>) {
  return reshape<S.e[I]...>(x);
}
template <dims S, class X>
constexpr auto reshape_dims(const X& x) {
  return reshape_dims<S>(x, std::make_index_sequence<static_cast<std::size_t>(S.rank)>{});
}
/// `in` with an extent 1 inserted at axis a.
constexpr dims with_unit_axis(dims in, int a) {
  dims out;
  out.rank = in.rank + 1;
  for (int i = 0, j = 0; i < out.rank; ++i) out.e[i] = i == a ? 1 : in.e[j++];
  return out;
}
/// `in` without axis a.
constexpr dims without_axis(dims in, int a) {
  dims out;
  out.rank = in.rank - 1;
  for (int i = 0, j = 0; i < in.rank; ++i)
    if (i != a) out.e[j++] = in.e[i];
  return out;
}
/// Rank `rank`, every extent 1 but `extent` at axis a.
constexpr dims unit_but(int rank, int a, index_t extent) {
  dims out;
  out.rank = rank;
  for (int i = 0; i < rank; ++i) out.e[i] = i == a ? extent : 1;
  return out;
}
/// The largest finite value and the epsilon of a floating dtype (torch.finfo's max and eps).
constexpr double finfo_max(dtype d) {
  return d == dtype::f64 ? std::numeric_limits<double>::max()
         : d == dtype::bf16 ? 3.38953138925153547590470800371487867e38  // 0x7f7f
                            : static_cast<double>(std::numeric_limits<float>::max());
}
constexpr double finfo_eps(dtype d) {
  return d == dtype::f64 ? std::numeric_limits<double>::epsilon()
         : d == dtype::bf16 ? 0.0078125  // 2^-7: 7 stored bits
                            : static_cast<double>(std::numeric_limits<float>::epsilon());
}
/// The dtype a float-only op computes x in (integers in f32, as kiln's float unary ops).
template <class X> inline constexpr dtype float_of = float_result(expr_t<X>::dt);
template <class X>
constexpr auto as_float(const X& x) {
  return to_dtype<float_of<X>>(as_expr(x));
}
}  // namespace detail

// ---- creation ------------------------------------------------------------------------------------

/// arange_like<Axis>(x): 0, 1, ..., n-1 (i64) for the extent n of x's axis Axis (x is not read).
template <int Axis = 0, tensor_operand X>
constexpr auto arange_like(const X& x) {
  using E = detail::expr_t<X>;
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || detail::axes_valid<Axis>(r), "kiln::arange_like: axis out of range");
  constexpr int a = detail::normal_axis(Axis, r);
  return ex::build<ex::iota<a, E>>(as_expr(x));
}
/// arange<N>(): torch.arange(N), 0 .. N-1 as i64.
template <index_t N>
constexpr auto arange() {
  static_assert(N >= 0, "kiln::arange: the length must not be negative");
  return arange_like<0>(broadcast_to<N>(make_scalar<dtype::i64>(0)));
}
/// full_like(x, v): v everywhere in x's shape and dtype (x is not read but for its shape).
template <tensor_operand X, class S>
  requires scalar_operand<S>
constexpr auto full_like(const X& x, S v) {
  constexpr dtype d = detail::expr_t<X>::dt;
  const auto e = as_expr(x);
  // x == x | x != x: true everywhere (NaN included), shaped like x
  return where(max(eq(e, e), ne(e, e)), make_scalar<d>(v), make_scalar<d>(v));
}
template <tensor_operand X>
constexpr auto zeros_like(const X& x) {
  return full_like(x, 0);
}
template <tensor_operand X>
constexpr auto ones_like(const X& x) {
  return full_like(x, 1);
}

// ---- pointwise ----------------------------------------------------------------------------------

/// e^x - 1, accurate near 0 (torch.expm1): Goldberg's (u - 1) x / log u, u = e^x, for |x| < 1/2
/// (x itself where u rounds to 1), e^x - 1 elsewhere, where it loses at most a bit.
template <tensor_operand X>
constexpr auto expm1(const X& x) {
  const auto f = detail::as_float(x);
  const auto small = lt(abs(f), 0.5);
  const auto xs = where(small, f, 0);  // the branch not taken stays finite
  const auto u = exp(xs);
  const auto at_one = eq(u, 1);
  const auto den = where(at_one, 1, log(u));
  const auto near = where(at_one, xs, (u - 1) * (xs / den));
  return where(small, near, exp(f) - 1);
}
/// log(1 + x), accurate near 0 (torch.log1p): Goldberg's log(u) x / (u - 1), u = 1 + x, for
/// |x| < 1/2 (x itself where u rounds to 1), log(1 + x) elsewhere.
template <tensor_operand X>
constexpr auto log1p(const X& x) {
  const auto f = detail::as_float(x);
  const auto small = lt(abs(f), 0.5);
  const auto xs = where(small, f, 0);
  const auto u = xs + 1;
  const auto at_one = eq(u, 1);
  const auto den = where(at_one, 1, u - 1);
  const auto near = where(at_one, xs, log(u) * (xs / den));
  return where(small, near, log(f + 1));
}
/// log2 and log10 (torch.log2, torch.log10): log x times the constant.
template <tensor_operand X>
constexpr auto log2(const X& x) {
  return log(detail::as_float(x)) * std::numbers::log2e;
}
template <tensor_operand X>
constexpr auto log10(const X& x) {
  return log(detail::as_float(x)) * std::numbers::log10e;
}
/// 2^x (torch.exp2), through pow, exact at integers.
template <tensor_operand X>
constexpr auto exp2(const X& x) {
  return pow(2.0, detail::as_float(x));
}
/// tan x = sin x / cos x.
template <tensor_operand X>
constexpr auto tan(const X& x) {
  const auto f = detail::as_float(x);
  return sin(f) / cos(f);
}
/// sinh and cosh: from expm1 (sinh) and e^x (cosh) for |x| <= 20; beyond, h * (h / 2) with
/// h = e^(|x|/2), so that results up to the largest float do not overflow on the way.
template <tensor_operand X>
constexpr auto sinh(const X& x) {
  const auto f = detail::as_float(x);
  const auto small = le(abs(f), 20);
  const auto xs = where(small, f, 0);
  const auto h = exp(abs(f) * 0.5);
  // the sign as a factor: a `where` between -big and big would send the branch not taken a zero
  // cotangent against big's infinite derivative (0 * inf) once big overflows
  return where(small, (expm1(xs) - expm1(-xs)) * 0.5, h * (h * 0.5) * where(lt(f, 0), -1, 1));
}
template <tensor_operand X>
constexpr auto cosh(const X& x) {
  const auto f = detail::as_float(x);
  const auto small = le(abs(f), 20);
  const auto xs = where(small, f, 0);
  const auto h = exp(abs(f) * 0.5);
  return where(small, (exp(xs) + exp(-xs)) * 0.5, h * (h * 0.5));
}
/// x^2 (torch.square).
template <tensor_operand X>
constexpr auto square(const X& x) {
  const auto e = as_expr(x);
  return e * e;
}
/// -1, 0 or 1 (torch.sign: 0 for +-0 and for NaN), in x's dtype; no gradient.
template <tensor_operand X>
constexpr auto sign(const X& x) {
  constexpr dtype d = detail::expr_t<X>::dt;
  const auto e = as_expr(x);
  return where(gt(e, 0), make_scalar<d>(1), where(lt(e, 0), make_scalar<d>(-1), make_scalar<d>(0)));
}
/// torch.clamp(x, lo, hi) = min(max(x, lo), hi): NaN stays NaN, hi wins where lo > hi, and
/// the gradient passes where lo <= x <= hi (not at NaN), as PyTorch's.
template <tensor_operand X, class L, class H>
  requires scalar_operand<L> && scalar_operand<H>
constexpr auto clamp(const X& x, L lo, H hi) {
  const auto e = as_expr(x);
  const auto d = detach(e);  // the value outside: no gradient (NaN's included)
  const auto t = where(lt(d, lo), lo, d);
  return where(min(ge(e, lo), le(e, hi)), e, where(gt(t, hi), hi, t));
}
template <tensor_operand X, class L>
  requires scalar_operand<L>
constexpr auto clamp_min(const X& x, L lo) {
  const auto e = as_expr(x);
  return where(ge(e, lo), e, where(lt(e, lo), lo, detach(e)));
}
template <tensor_operand X, class H>
  requires scalar_operand<H>
constexpr auto clamp_max(const X& x, H hi) {
  const auto e = as_expr(x);
  return where(le(e, hi), e, where(gt(e, hi), hi, detach(e)));
}
/// torch.nn.functional.hardtanh: clamp to [lo, hi], with the gradient passing strictly inside.
template <tensor_operand X>
constexpr auto hardtanh(const X& x, double lo = -1, double hi = 1) {
  const auto f = detail::as_float(x);
  return where(min(gt(f, lo), lt(f, hi)), f, where(le(f, lo), lo, where(ge(f, hi), hi, detach(f))));
}
template <tensor_operand X>
constexpr auto relu6(const X& x) {
  return hardtanh(x, 0, 6);
}
/// torch.nn.functional.leaky_relu: x above 0, slope * x elsewhere (the gradient at 0 is slope).
template <tensor_operand X>
constexpr auto leaky_relu(const X& x, double slope = 0.01) {
  const auto f = detail::as_float(x);
  return where(gt(f, 0), f, f * slope);
}
/// torch.nn.functional.elu: x above 0, alpha (e^x - 1) elsewhere.
template <tensor_operand X>
constexpr auto elu(const X& x, double alpha = 1) {
  const auto f = detail::as_float(x);
  const auto pos = gt(f, 0);
  return where(pos, f, expm1(where(pos, 0, f)) * alpha);
}
/// torch.nn.functional.mish: x tanh(softplus(x)).
template <tensor_operand X>
constexpr auto mish(const X& x) {
  const auto f = detail::as_float(x);
  return f * tanh(softplus(f));
}
/// torch.isnan, isinf, isfinite: bool, shaped like x (false, false, true for integers).
template <tensor_operand X>
constexpr auto isnan(const X& x) {
  const auto e = as_expr(x);
  return ne(e, e);
}
template <tensor_operand X>
constexpr auto isinf(const X& x) {
  const auto e = as_expr(x);
  if constexpr (is_floating(decltype(e)::dt)) return eq(abs(e), detail::inf);
  else return ne(e, e);
}
template <tensor_operand X>
constexpr auto isfinite(const X& x) {
  const auto e = as_expr(x);
  if constexpr (is_floating(decltype(e)::dt)) return lt(abs(e), detail::inf);
  else return eq(e, e);
}
/// torch.nan_to_num: NaN to `nan`, +inf to `posinf` and -inf to `neginf` (by default the
/// dtype's largest and lowest finite values), in x's dtype.
template <tensor_operand X>
constexpr auto nan_to_num(const X& x, double nan = 0, std::optional<double> posinf = {},
                          std::optional<double> neginf = {}) {
  constexpr dtype d = detail::expr_t<X>::dt;
  const auto e = as_expr(x);
  if constexpr (!is_floating(d)) {
    return e;
  } else {
    const double hi = posinf ? *posinf : detail::finfo_max(d);
    const double lo = neginf ? *neginf : -detail::finfo_max(d);
    return where(ne(e, e), make_scalar<d>(nan),
                 where(eq(e, detail::inf), make_scalar<d>(hi), where(eq(e, -detail::inf), make_scalar<d>(lo), e)));
  }
}
/// torch.masked_fill: v where mask is true, else x (x's dtype).
template <tensor_operand X, tensor_operand M, class S>
  requires scalar_operand<S>
constexpr auto masked_fill(const X& x, const M& mask, S v) {
  return where(mask, make_scalar<detail::expr_t<X>::dt>(v), x);
}
/// torch.logical_not, logical_and, logical_or, logical_xor: bool, nonzero being true.
template <tensor_operand X>
constexpr auto logical_not(const X& x) {
  return eq(x, 0);
}
template <tensor_operand A, tensor_operand B>
constexpr auto logical_and(const A& a, const B& b) {
  return min(ne(a, 0), ne(b, 0));
}
template <tensor_operand A, tensor_operand B>
constexpr auto logical_or(const A& a, const B& b) {
  return max(ne(a, 0), ne(b, 0));
}
template <tensor_operand A, tensor_operand B>
constexpr auto logical_xor(const A& a, const B& b) {
  return ne(ne(a, 0), ne(b, 0));
}

// ---- reductions ---------------------------------------------------------------------------------

namespace detail {
template <bool Keep, int... Ax, tensor_operand X>
constexpr auto logsumexp_impl(const X& x) {
  const auto f = as_float(x);
  // the maximum only shifts the exponents: no gradient through it (it would cancel)
  const auto m = detach(amax<Ax...>(f, keepdim));
  const auto shift = where(isinf(m), 0, m);  // all -inf (or an inf): no inf - inf
  const auto r = log(sum<Ax...>(exp(f - shift), keepdim)) + shift;
  if constexpr (Keep) return r;
  else return sum<Ax...>(r);  // drops the reduced axes (each of extent 1)
}
}  // namespace detail
/// torch.logsumexp over the axes Ax... (all when none): log(sum(e^x)), computed as
/// m + log(sum(e^(x - m))) with m the maximum; its gradient is softmax(x).
template <int... Ax, tensor_operand X>
constexpr auto logsumexp(const X& x) {
  return detail::logsumexp_impl<false, Ax...>(x);
}
template <int... Ax, tensor_operand X>
constexpr auto logsumexp(const X& x, keepdim_t) {
  return detail::logsumexp_impl<true, Ax...>(x);
}
/// torch.std (unbiased): the square root of var. (Not `std`: that names C++'s namespace.)
template <int... Ax, tensor_operand X>
constexpr auto stddev(const X& x) {
  return sqrt(var<Ax...>(x));
}
template <int... Ax, tensor_operand X>
constexpr auto stddev(const X& x, keepdim_t) {
  return sqrt(var<Ax...>(x, keepdim));
}
/// torch.any and torch.all over the axes Ax... (all when none): bool, nonzero being true.
template <int... Ax, tensor_operand X>
constexpr auto any(const X& x) {
  return gt(sum<Ax...>(ne(x, 0)), 0);
}
template <int... Ax, tensor_operand X>
constexpr auto any(const X& x, keepdim_t) {
  return gt(sum<Ax...>(ne(x, 0), keepdim), 0);
}
template <int... Ax, tensor_operand X>
constexpr auto all(const X& x) {
  return eq(sum<Ax...>(eq(x, 0)), 0);
}
template <int... Ax, tensor_operand X>
constexpr auto all(const X& x, keepdim_t) {
  return eq(sum<Ax...>(eq(x, 0), keepdim), 0);
}

namespace detail {
/// The first index along Axis where x is at its extreme (O: amax or amin), NaN counting as the
/// extreme (torch.argmax, argmin); i64, with the axis kept as extent 1.
template <op O, int Axis, tensor_operand X>
constexpr auto arg_extreme(const X& x) {
  using E = expr_t<X>;
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || (r > 0 && axes_valid<Axis>(r)), "kiln::argmax/argmin: axis out of range");
  constexpr int a = normal_axis(Axis, r);
  const auto e = as_expr(x);
  const auto m = reduce_op<O, true, Axis>(e);
  const auto hit = max(eq(e, m), ne(e, e));
  const auto index = reshape_dims<unit_but(r, a, E::shape.e[a])>(arange_like<a>(e));
  return reduce_op<op::amin, true, Axis>(where(hit, index, std::numeric_limits<std::int64_t>::max()));
}
template <op O, bool Keep, int Axis, tensor_operand X>
constexpr auto arg_extreme_out(const X& x) {
  const auto i = arg_extreme<O, Axis>(x);
  if constexpr (Keep) return i;
  else return reduce_op<op::amin, false, Axis>(i);  // drops the axis (extent 1)
}
}  // namespace detail
/// torch.argmax(x, dim) / argmin: the first index of the largest (smallest) value along Axis,
/// i64; NaN counts as the largest (and the smallest), as in PyTorch. Without an axis, of x
/// flattened.
template <int Axis, tensor_operand X>
constexpr auto argmax(const X& x) {
  return detail::arg_extreme_out<op::amax, false, Axis>(x);
}
template <int Axis, tensor_operand X>
constexpr auto argmax(const X& x, keepdim_t) {
  return detail::arg_extreme_out<op::amax, true, Axis>(x);
}
template <int Axis, tensor_operand X>
constexpr auto argmin(const X& x) {
  return detail::arg_extreme_out<op::amin, false, Axis>(x);
}
template <int Axis, tensor_operand X>
constexpr auto argmin(const X& x, keepdim_t) {
  return detail::arg_extreme_out<op::amin, true, Axis>(x);
}
template <tensor_operand X>
constexpr auto argmax(const X& x) {
  return argmax<0>(reshape<dyn>(x));
}
template <tensor_operand X>
constexpr auto argmin(const X& x) {
  return argmin<0>(reshape<dyn>(x));
}

// ---- shape --------------------------------------------------------------------------------------

/// torch.unsqueeze: an axis of extent 1 inserted at Axis (of the result's rank; negatives
/// count from its end). Through reshape: x may have at most one dyn extent.
template <int Axis, tensor_operand X>
constexpr auto unsqueeze(const X& x) {
  using E = detail::expr_t<X>;
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || detail::axes_valid<Axis>(r + 1), "kiln::unsqueeze: axis out of range");
  return detail::reshape_dims<detail::with_unit_axis(E::shape, detail::normal_axis(Axis, r + 1))>(x);
}
/// torch.squeeze(x, dim): without axis Axis if its extent is 1, else x unchanged (as PyTorch).
template <int Axis, tensor_operand X>
constexpr auto squeeze(const X& x) {
  using E = detail::expr_t<X>;
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || (r > 0 && detail::axes_valid<Axis>(r)), "kiln::squeeze: axis out of range");
  constexpr int a = detail::normal_axis(Axis, r);
  if constexpr (E::shape.e[a] != 1) return as_expr(x);
  else return detail::reshape_dims<detail::without_axis(E::shape, a)>(x);
}
/// torch.stack: the tensors (of one shape) joined along a new axis Axis.
template <int Axis, tensor_operand A, tensor_operand... Rest>
constexpr auto stack(const A& a, const Rest&... rest) {
  if constexpr (sizeof...(Rest) == 0) return unsqueeze<Axis>(a);
  else return concat<Axis>(unsqueeze<Axis>(a), unsqueeze<Axis>(rest)...);
}
/// torch.outer: a [n] and b [m] to [n, m], a_i b_j.
template <tensor_operand A, tensor_operand B>
constexpr auto outer(const A& a, const B& b) {
  static_assert(detail::expr_t<A>::shape.rank == 1 && detail::expr_t<B>::shape.rank == 1,
                "kiln::outer: both operands must be vectors (rank 1)");
  return unsqueeze<1>(a) * unsqueeze<0>(b);
}
/// torch.bmm: matmul of two rank-3 tensors [b, n, k] x [b, k, m].
template <tensor_operand A, tensor_operand B>
constexpr auto bmm(const A& a, const B& b) {
  static_assert(detail::expr_t<A>::shape.rank == 3 && detail::expr_t<B>::shape.rank == 3,
                "kiln::bmm: both operands must have rank 3 ([batch, n, k] and [batch, k, m])");
  return matmul(a, b);
}
/// torch.addmm: beta c + alpha (a b) for matrices a and b; c is not read where beta is 0.
template <tensor_operand C, tensor_operand A, tensor_operand B>
constexpr auto addmm(const C& c, const A& a, const B& b, double beta = 1, double alpha = 1) {
  static_assert(detail::expr_t<A>::shape.rank == 2 && detail::expr_t<B>::shape.rank == 2,
                "kiln::addmm: a and b must be matrices (rank 2)");
  const auto p = matmul(a, b) * alpha;
  const auto keep_c = make_scalar<dtype::boolean>(beta != 0);
  return where(keep_c, as_expr(c) * beta, 0) + p;
}

namespace detail {
/// Whether element (i, j) of the last two axes is on the kept side of diagonal K.
template <int K, bool Upper, tensor_operand X>
constexpr auto triangle(const X& x) {
  using E = expr_t<X>;
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || r >= 2, "kiln::triu/tril: the operand needs rank 2 or more");
  const auto e = as_expr(x);
  const auto rows = reshape_dims<dims{E::shape.e[r - 2], 1}>(arange_like<r - 2>(e));
  const auto cols = arange_like<r - 1>(e);
  const auto diff = cols - rows;
  if constexpr (Upper) return where(ge(diff, K), e, make_scalar<E::dt>(0));
  else return where(le(diff, K), e, make_scalar<E::dt>(0));
}
}  // namespace detail
/// torch.triu / torch.tril: the elements on and above (below) diagonal K of the last two axes,
/// zeros elsewhere.
template <int K = 0, tensor_operand X>
constexpr auto triu(const X& x) {
  return detail::triangle<K, true>(x);
}
template <int K = 0, tensor_operand X>
constexpr auto tril(const X& x) {
  return detail::triangle<K, false>(x);
}
/// torch.roll(x, Shift, Axis): element i goes to (i + Shift) mod n (a static extent n).
template <index_t Shift, int Axis, tensor_operand X>
constexpr auto roll(const X& x) {
  using E = detail::expr_t<X>;
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || (r > 0 && detail::axes_valid<Axis>(r)), "kiln::roll: axis out of range");
  constexpr int a = detail::normal_axis(Axis, r);
  constexpr index_t n = E::shape.e[a];
  static_assert(n != dyn, "kiln::roll: the axis must have a static extent");
  constexpr index_t s = n == 0 ? 0 : ((Shift % n) + n) % n;
  if constexpr (s == 0) return as_expr(x);
  else return concat<a>(slice<a, n - s, n>(x), slice<a, 0, n - s>(x));
}
/// torch.flip(x, [Axis]): the axis reversed (a static extent), through gather.
template <int Axis, tensor_operand X>
constexpr auto flip(const X& x) {
  using E = detail::expr_t<X>;
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || (r > 0 && detail::axes_valid<Axis>(r)), "kiln::flip: axis out of range");
  constexpr int a = detail::normal_axis(Axis, r);
  static_assert(E::shape.e[a] != dyn, "kiln::flip: the axis must have a static extent");
  const auto e = as_expr(x);
  const auto reversed = (E::shape.e[a] - 1) - arange_like<a>(e);
  if constexpr (a == 0) return gather(e, reversed);
  else return transpose<0, a>(gather(transpose<0, a>(e), reversed));
}
/// torch.index_select(x, Axis, index): the slices of x along Axis that index (integers, rank 1)
/// names, in its order; an index out of range throws when the graph runs.
template <int Axis, tensor_operand X, tensor_operand I>
constexpr auto index_select(const X& x, const I& index) {
  using E = detail::expr_t<X>;
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || (r > 0 && detail::axes_valid<Axis>(r)), "kiln::index_select: axis out of range");
  static_assert(detail::expr_t<I>::shape.rank == 1, "kiln::index_select: the index must be a vector (rank 1)");
  constexpr int a = detail::normal_axis(Axis, r);
  if constexpr (a == 0) return gather(x, index);
  else return transpose<0, a>(gather(transpose<0, a>(as_expr(x)), index));
}

// ---- losses and norms -----------------------------------------------------------------------------

/// torch.nn.functional.nll_loss(logp, target) with its defaults: -mean over the rows of
/// logp[i, target[i]] for logp [N, C] and integer targets [N]; rows whose target is
/// `ignore_index` (-100) count in neither the sum nor the mean. A target outside [0, C) other
/// than ignore_index picks nothing (PyTorch stops with an error).
template <tensor_operand L, tensor_operand Y>
constexpr auto nll_loss(const L& logp, const Y& target, std::int64_t ignore_index = -100) {
  using EL = detail::expr_t<L>;
  using EY = detail::expr_t<Y>;
  static_assert(EL::shape.rank == 2 && EY::shape.rank == 1, "kiln::nll_loss: logp [N, C] and target [N]");
  static_assert(is_integral(EY::dt) && EY::dt != dtype::boolean, "kiln::nll_loss: the targets must be integers");
  const auto t = detail::reshape_dims<dims{EY::shape.e[0], 1}>(target);
  const auto pick = eq(arange_like<1>(logp), t);  // [N, C]
  const auto kept = ne(target, ignore_index);
  const auto total = sum(where(pick, as_expr(logp), 0));
  return -(total / sum(cast<EL::dt>(kept)));
}
/// RMSNorm over the last axis (torch.nn.functional.rms_norm, PyTorch 2.4): x / sqrt(mean(x^2) +
/// eps) * weight; eps by default the dtype's epsilon, as PyTorch's.
template <tensor_operand X, tensor_operand W>
constexpr auto rms_norm(const X& x, const W& weight, std::optional<double> eps = {}) {
  const auto f = detail::as_float(x);
  const double e = eps ? *eps : detail::finfo_eps(detail::float_of<X>);
  return f * rsqrt(mean<-1>(f * f, keepdim) + e) * weight;
}

}  // namespace kiln
