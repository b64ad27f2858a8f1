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
#include <tuple>
#include <utility>

#include "expr.hpp"
#include "expr_nn.hpp"
#include "grad.hpp"

namespace kiln {

namespace ex {
/// 0 .. n-1 (i64) for the extent n of A's axis Axis (op::iota; A's values are not read).
template <int Axis, class A>
struct iota : node_base<A> {
  static constexpr node proto() {
    node n = detail::make_node(op::iota, dtype::i64, dims{});  // (the dtype is the node's own)
    n.axis = Axis;
    return n;
  }
  static constexpr detail::typed t = detail::by_rule<A>(proto(), dtype::i64);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};
/// An op along Axis of A, of A's shape and dtype Dt, with a flag in node.value: cumsum's running
/// sums (from the end if Flag), argsort's indices (descending if Flag).
template <op O, dtype Dt, int Axis, bool Flag, class A>
struct along_axis : node_base<A> {
  static constexpr node proto() {
    node n = detail::make_node(O, Dt, dims{});
    n.axis = Axis;
    n.value = Flag ? 1 : 0;
    return n;
  }
  static constexpr detail::typed t = detail::by_rule<A>(proto(), Dt);
  static_assert(A::shape.poisoned() || t.dt == Dt, "kiln: along_axis: Dt is not the op's result dtype");
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
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
/// x broadcast to the shape S (a dims value), through broadcast_to<...>.
template <dims S, class X, std::size_t... I>
constexpr auto broadcast_dims(const X& x, std::index_sequence<I...>) {
  return broadcast_to<S.e[I]...>(x);
}
template <dims S, class X>
constexpr auto broadcast_dims(const X& x) {
  return broadcast_dims<S>(x, std::make_index_sequence<static_cast<std::size_t>(S.rank)>{});
}
/// `in` with extent n at axis a.
constexpr dims with_extent(dims in, int a, index_t n) {
  in.e[a] = n;
  return in;
}
/// A scalar operand as a rank-0 value of dtype D; a tensor operand as its expression.
template <dtype D, class S>
constexpr auto operand_as(const S& s) {
  if constexpr (tensor_operand<S>) return as_expr(s);
  else return make_scalar<D>(s);
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
  return arange_like<0>(broadcast_to<N>(detail::k<dtype::i64, 0>));
}
/// torch.eye(N, M): ones on the diagonal of an [N, M] matrix, zeros elsewhere (f32 by default).
template <index_t N, index_t M = N, dtype D = dtype::f32>
constexpr auto eye() {
  static_assert(N >= 0 && M >= 0, "kiln::eye: the extents must not be negative");
  return cast<D>(eq(reshape<N, 1>(arange<N>()), arange<M>()));
}
/// torch.linspace(start, end, Steps) (f32 by default): start + i step for the first half, end -
/// (Steps - 1 - i) step for the second, with step rounded to D first, as PyTorch computes it
/// (so that both ends are exact).
template <index_t Steps, dtype D = dtype::f32>
constexpr auto linspace(double start, double end) {
  static_assert(D == dtype::f32 || D == dtype::f64, "kiln::linspace: f32 or f64");
  static_assert(Steps >= 0, "kiln::linspace: the number of steps must not be negative");
  double step = 0;
  if (Steps > 1) {
    if constexpr (D == dtype::f64) step = (end - start) / static_cast<double>(Steps - 1);
    else step = (static_cast<float>(end) - static_cast<float>(start)) / static_cast<float>(Steps - 1);
  }
  const auto i = cast<D>(arange<Steps>());
  const auto s = make_scalar<D>(step);
  const auto low = make_scalar<D>(start) + s * i;
  const auto high = make_scalar<D>(end) - s * (static_cast<double>(Steps - 1) - i);
  // (one step: start, as PyTorch's)
  return where(lt(i, static_cast<double>(Steps == 1 ? 1 : Steps / 2)), low, high);
}
/// torch.full((S...), v), zeros and ones: f32, as PyTorch's default (cast<D> for another).
template <index_t... S, class V>
  requires scalar_operand<V>
constexpr auto full(V v) {
  return broadcast_to<S...>(make_scalar<dtype::f32>(v));
}
template <index_t... S>
constexpr auto zeros() {
  return full<S...>(0);
}
template <index_t... S>
constexpr auto ones() {
  return full<S...>(1);
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
  constexpr dtype d = detail::float_of<X>;
  const auto one = detail::k<d, 1>;
  const auto f = detail::as_float(x);
  const auto small = lt(abs(f), detail::k<d, 1, 2>);
  const auto xs = where(small, f, detail::k<d, 0>);  // the branch not taken stays finite
  const auto u = exp(xs);
  const auto at_one = eq(u, one);
  const auto den = where(at_one, one, log(u));
  const auto near = where(at_one, xs, (u - one) * (xs / den));
  return where(small, near, exp(f) - one);
}
/// log(1 + x), accurate near 0 (torch.log1p): Goldberg's log(u) x / (u - 1), u = 1 + x, for
/// |x| < 1/2 (x itself where u rounds to 1), log(1 + x) elsewhere.
template <tensor_operand X>
constexpr auto log1p(const X& x) {
  constexpr dtype d = detail::float_of<X>;
  const auto one = detail::k<d, 1>;
  const auto f = detail::as_float(x);
  const auto small = lt(abs(f), detail::k<d, 1, 2>);
  const auto xs = where(small, f, detail::k<d, 0>);
  const auto u = xs + one;
  const auto at_one = eq(u, one);
  const auto den = where(at_one, one, u - one);
  const auto near = where(at_one, xs, log(u) * (xs / den));
  return where(small, near, log(f + one));
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
/// h = e^(|x|/2), so that results up to the largest float do not overflow on the way. The
/// gradient of h * (h / 2) forms e^|x| (twice the result) on its way through e^(|x|/2), which
/// overflows float for |x| in (88.7, 89.4] where the gradient itself does not: f32 and bf16
/// compute in f64 (which then also rounds the result once).
namespace detail {
/// sinh (Odd) or cosh of x, as described above.
template <bool Odd, tensor_operand X>
constexpr auto hyperbolic(const X& x) {
  constexpr dtype d = float_of<X>;
  if constexpr (d != dtype::f64) {
    return cast<d>(hyperbolic<Odd>(cast<dtype::f64>(x)));
  } else {
    const auto half = k<d, 1, 2>;
    const auto f = as_float(x);
    const auto small = le(abs(f), k<d, 20>);
    const auto xs = where(small, f, k<d, 0>);
    const auto h = exp(abs(f) * half);
    // sinh's sign as a factor: a `where` between -big and big would send the branch not taken
    // a zero cotangent against big's infinite derivative (0 * inf) once big overflows
    if constexpr (Odd)
      return where(small, (expm1(xs) - expm1(-xs)) * half, h * (h * half) * where(lt(f, k<d, 0>), k<d, -1>, k<d, 1>));
    else
      return where(small, (exp(xs) + exp(-xs)) * half, h * (h * half));
  }
}
}  // namespace detail
template <tensor_operand X>
constexpr auto sinh(const X& x) {
  return detail::hyperbolic<true>(x);
}
template <tensor_operand X>
constexpr auto cosh(const X& x) {
  return detail::hyperbolic<false>(x);
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
  return where(gt(e, detail::k<d, 0>), detail::k<d, 1>, where(lt(e, detail::k<d, 0>), detail::k<d, -1>, detail::k<d, 0>));
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
// ---- remainders (floor, ceil, round, trunc, fmod and atan2 are primitives: graph/expr.hpp) -----

/// torch.remainder (Python's %; floats and integers, a zero divisor throwing): the sign of b. From C's exact fmod, r + b where r is
/// nonzero and its sign is not b's, as PyTorch computes it; d/da = 1, d/db = -floor(a / b).
template <class A, class B>
  requires((tensor_operand<A> || scalar_operand<A>) && (tensor_operand<B> || scalar_operand<B>) &&
           (tensor_operand<A> || tensor_operand<B>))
constexpr auto remainder(const A& a, const B& b) {
  const auto r = fmod(a, b);
  constexpr dtype d = std::remove_cvref_t<decltype(r)>::dt;
  const auto bb = detail::operand_as<d>(b);
  const auto zero = detail::k<d, 0>;
  const auto fix = min(ne(r, zero), ne(lt(bb, zero), lt(r, zero)));
  return where(fix, r + bb, r);
}
namespace detail {
template <class S>
constexpr bool is_bool_operand() {
  if constexpr (tensor_operand<S>) return expr_t<S>::dt == dtype::boolean;
  else return std::is_same_v<S, bool>;
}
template <bool Bools, class A, class B>
struct fmod_type {
  using type = std::remove_cvref_t<decltype(fmod(std::declval<const A&>(), std::declval<const B&>()))>;
};
template <class A, class B>
struct fmod_type<true, A, B> {
  using type = ex::invalid<dtype::boolean>;
};
/// a / b toward zero, for integers of one dtype (kiln's `/` divides in floating point, as
/// PyTorch's; this is the div node of integers, which only floor_divide builds).
template <class A, class B>
constexpr auto integer_quotient(const A& a, const B& b) {
  return ex::build<ex::binary<op::div, A, B>>(a, b);
}
}  // namespace detail
/// torch.floor_divide: a / b rounded toward -inf. Integers: C's quotient q, less 1 where the
/// remainder a - q b is nonzero and its sign is not b's (a zero divisor throws, as PyTorch's).
/// Floats: computed as PyTorch does, from the exact fmod ((a - fmod(a, b)) / b, less 1 where the
/// remainder's sign is not b's, then rounded to the nearest integer), so that a quotient that
/// rounds up to an integer is not taken for it; a / b where b = 0. Piecewise constant: no
/// gradient (PyTorch has none).
template <class A, class B>
  requires((tensor_operand<A> || scalar_operand<A>) && (tensor_operand<B> || scalar_operand<B>) &&
           (tensor_operand<A> || tensor_operand<B>))
constexpr auto floor_divide(const A& a, const B& b) {
  constexpr bool bools = detail::is_bool_operand<A>() && detail::is_bool_operand<B>();
  static_assert(!bools, "kiln::floor_divide: not for bools (as PyTorch's)");
  // the dtype, and fmod's checks of both operands (not for bools: one error, the above)
  using M = typename detail::fmod_type<bools, A, B>::type;
  constexpr dtype d = M::dt;
  if constexpr (bools || M::shape.poisoned()) {
    return ex::invalid<d>{};
  } else if constexpr (!is_floating(d)) {
    const auto zero = detail::k<d, 0>;
    const auto one = detail::k<d, 1>;
    const auto aa = to_dtype<d>(detail::operand_as<d>(a));
    const auto bb = to_dtype<d>(detail::operand_as<d>(b));
    const auto q = detail::integer_quotient(aa, bb);
    const auto r = aa - q * bb;  // exact, wrapping or not
    return where(min(ne(r, zero), ne(lt(bb, zero), lt(r, zero))), q - one, q);
  } else {
    const auto zero = detail::k<d, 0>;
    const auto one = detail::k<d, 1>;
    const auto m = fmod(a, b);
    const auto aa = detail::operand_as<d>(a);
    const auto bb = detail::operand_as<d>(b);
    const auto fix = min(ne(m, zero), ne(lt(bb, zero), lt(m, zero)));
    const auto exact = (aa - m) / bb;
    const auto q = where(fix, exact - one, exact);
    const auto f = floor(q);
    const auto nearest = where(gt(q - f, detail::k<d, 1, 2>), f + one, f);
    const auto quotient = aa / bb;
    const auto signed_zero = where(lt(quotient, zero), detail::lit<d, detail::bits(-0.0)>, zero);
    return detach(where(eq(bb, zero), quotient, where(ne(q, zero), nearest, signed_zero)));
  }
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
  constexpr dtype d = detail::float_of<X>;
  const auto pos = gt(f, detail::k<d, 0>);
  return where(pos, f, expm1(where(pos, detail::k<d, 0>, f)) * alpha);
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
  constexpr dtype d = decltype(e)::dt;
  if constexpr (is_floating(d)) return eq(abs(e), detail::lit<d, detail::bits(detail::inf)>);
  else return ne(e, e);
}
template <tensor_operand X>
constexpr auto isfinite(const X& x) {
  const auto e = as_expr(x);
  constexpr dtype d = decltype(e)::dt;
  if constexpr (is_floating(d)) return lt(abs(e), detail::lit<d, detail::bits(detail::inf)>);
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
  const auto shift = where(isinf(m), k<float_of<X>, 0>, m);  // all -inf (or an inf): no inf - inf
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

// ---- scans ----------------------------------------------------------------------------------------

namespace detail {
/// A running sum or product (O) along Axis: floats in their dtype, bool and integers as i64.
template <op O, int Axis, class X>
constexpr auto scan(const X& x) {
  using E = expr_t<X>;
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || (r > 0 && axes_valid<Axis>(r)), "kiln::cumsum/cumprod: axis out of range");
  constexpr dtype d = is_floating(E::dt) ? E::dt : dtype::i64;
  const auto c = to_dtype<d>(as_expr(x));
  return ex::build<ex::along_axis<O, d, normal_axis(Axis, r), false, std::remove_cvref_t<decltype(c)>>>(c);
}
}  // namespace detail
/// torch.cumsum(x, Axis): running sums along Axis, a kernel of its own (op::cumsum), floats
/// accumulated in double; bool and integers sum as i64, as in PyTorch. Its gradient is the
/// cotangent's running sums from the other end.
template <int Axis, tensor_operand X>
constexpr auto cumsum(const X& x) {
  return detail::scan<op::cumsum, Axis>(x);
}
/// torch.cumprod(x, Axis): running products along Axis, a kernel of its own (op::cumprod),
/// accumulated as cumsum's; bool and integers as i64. Its gradient is PyTorch's, zeros included.
template <int Axis, tensor_operand X>
constexpr auto cumprod(const X& x) {
  return detail::scan<op::cumprod, Axis>(x);
}
namespace detail {
template <int Axis, bool Keep, class X>
constexpr auto prod_along(const X& x) {
  using E = expr_t<X>;
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || (r > 0 && axes_valid<Axis>(r)), "kiln::prod: axis out of range");
  constexpr int a = normal_axis(Axis, r);
  constexpr index_t n = E::shape.e[a];
  static_assert(n != dyn, "kiln::prod: the extent along the axis must be static");
  if constexpr (n == 0) {
    if constexpr (Keep) return full_like(sum<a>(cumprod<a>(x), keepdim), 1);  // the empty product
    else return full_like(sum<a>(cumprod<a>(x)), 1);
  } else {
    // the last running product, its gradient cumprod's (zeros as PyTorch's)
    const auto last = slice<a, n - 1, n>(cumprod<a>(x));
    if constexpr (Keep) {
      return last;
    } else {
      // without the axis: a reshape (a sum would turn -0 into +0)
      constexpr dims s = [] {
        dims d = E::shape;
        for (int i = a; i + 1 < d.rank; ++i) d.e[i] = d.e[i + 1];
        --d.rank;
        return d;
      }();
      return reshape_dims<s>(last);
    }
  }
}
}  // namespace detail
/// torch.prod(x, Axis[, keepdim]) and torch.prod(x) (all elements): the last running product of
/// cumprod, so accumulated in double for floats, i64 for bool and integers; the extent along
/// the axis must be static.
template <int Axis, tensor_operand X>
constexpr auto prod(const X& x) {
  return detail::prod_along<Axis, false>(x);
}
template <int Axis, tensor_operand X>
constexpr auto prod(const X& x, keepdim_t) {
  return detail::prod_along<Axis, true>(x);
}
template <tensor_operand X>
constexpr auto prod(const X& x) {
  using E = detail::expr_t<X>;
  static_assert(E::shape.poisoned() || E::shape.is_static(), "kiln::prod: static extents");
  return detail::prod_along<0, false>(detail::reshape_dims<dims{E::shape.numel()}>(x));
}

/// torch.argsort(x, Axis, descending, stable=True): the indices (i64) that sort x along Axis,
/// a kernel of its own (op::argsort); equal values keep their order, NaN sorts above every
/// number. No gradient (integers).
template <int Axis = -1, bool Descending = false, tensor_operand X>
constexpr auto argsort(const X& x) {
  using E = detail::expr_t<X>;
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || (r > 0 && detail::axes_valid<Axis>(r)), "kiln::argsort: axis out of range");
  return ex::build<ex::along_axis<op::argsort, dtype::i64, detail::normal_axis(Axis, r), Descending, E>>(as_expr(x));
}

namespace detail {
/// Row-major strides of static extents s.
constexpr index_t stride_of(const dims& s, int axis) {
  index_t n = 1;
  for (int i = axis + 1; i < s.rank; ++i) n *= s.e[i];
  return n;
}
/// For each element of it (rank r, extents at most XS's on every axis but the last), the flat
/// offset in a contiguous XS of the start of its line along the last axis.
template <dims XS, class I, int... D>
constexpr auto line_offsets(std::integer_sequence<int, D...>) {
  constexpr dims is = expr_t<I>::shape;
  constexpr bool same_lines = ((is.e[D] == XS.e[D]) && ...);
  if constexpr (sizeof...(D) == 0) {
    return k<dtype::i64, 0>;
  } else if constexpr (same_lines) {  // one iota over the lines
    constexpr index_t n = XS.e[XS.rank - 1], lines = XS.numel() / (n > 0 ? n : 1);
    return reshape_dims<with_extent(XS, XS.rank - 1, 1)>(arange<lines>() * k<dtype::i64, n>);
  } else {
    return ((reshape_dims<unit_but(XS.rank, D, is.e[D])>(arange<is.e[D]>() * k<dtype::i64, stride_of(XS, D)>)) + ...);
  }
}
/// The positions in a contiguous XS flattened that it (indices along XS's last axis) names.
/// Checked: an index outside [0, extent) is sent to -1, which gather and scatter_add reject
/// (std::out_of_range) before they write anything, rather than into another line.
template <dims XS, bool Checked, class I>
constexpr auto flat_indices(const I& it) {
  const auto offsets = line_offsets<XS, I>(std::make_integer_sequence<int, XS.rank - 1>{});
  if constexpr (Checked) {
    const auto i = cast<dtype::i64>(it);
    const auto inside = logical_and(ge(i, k<dtype::i64, 0>), lt(i, k<dtype::i64, XS.e[XS.rank - 1]>));
    return where(inside, i + offsets, k<dtype::i64, -1>);
  } else {
    return it + offsets;
  }
}
/// x's values along axis A taken at the positions that idx names along that axis (idx of x's
/// rank, its extents at most x's on the other axes: torch.gather), through one gather over x
/// flattened with each line's offset added to its indices, so that the gradient is a
/// scatter_add back to where each value came from. Checked: indices outside the axis throw
/// (flat_indices).
template <int A, bool Checked, class X, class I>
constexpr auto take_along(const X& x, const I& idx) {
  using E = expr_t<X>;
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || E::shape.is_static(), "kiln::gather/sort/topk: static extents");
  const auto xt = transpose<A, r - 1>(as_expr(x));  // the axis last
  const auto it = transpose<A, r - 1>(as_expr(idx));
  constexpr dims st = expr_t<decltype(xt)>::shape;
  return transpose<A, r - 1>(gather(reshape<st.numel()>(xt), flat_indices<st, Checked>(it)));
}
/// Whether idx fits x for torch.gather / scatter_add along axis a: the same rank, integer, and
/// extents at most x's on every other axis (and at most src's on every axis, for scatter_add).
constexpr bool along_fits(const dims& x, const dims& idx, int a, const dims& src) {
  if (x.poisoned() || idx.poisoned() || src.poisoned()) return true;
  if (!x.is_static() || !idx.is_static() || idx.rank != x.rank || x.rank < 1) return false;
  for (int i = 0; i < x.rank; ++i)
    if ((i != a && idx.e[i] > x.e[i]) || (src.rank > 0 && (src.rank != x.rank || idx.e[i] > src.e[i]))) return false;
  return true;
}
/// Whether gather<Axis> and scatter_add<Axis> take these operands; Src: scatter_add's source
/// shape (rank 0 for gather).
template <int Axis, class E, class EI, dims Src>
constexpr bool along_ok() {
  constexpr int r = E::shape.rank;
  if constexpr (!E::shape.poisoned() && !(r > 0 && axes_valid<Axis>(r))) return false;
  else return is_integral(EI::dt) && EI::dt != dtype::boolean && along_fits(E::shape, EI::shape, normal_axis(Axis, r), Src);
}
/// Their compile-time errors, one for each check that fails. Called as a statement, apart from
/// along_ok: clang would count a call in a constant expression to a function whose
/// instantiation failed as a second error.
template <op O, int Axis, class E, class EI, dims Src>
constexpr void along_errors() {
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || (r > 0 && axes_valid<Axis>(r)), "kiln::gather/scatter_add: axis out of range");
  constexpr bool int_ok = is_integral(EI::dt) && EI::dt != dtype::boolean;
  constexpr bool fit_ok = along_fits(E::shape, EI::shape, normal_axis(Axis, r), Src);
  (void)error::indices_must_be_integers<O, EI::dt, int_ok>::value;
  (void)error::gather_along_shapes_do_not_match<O, as_shape<E::shape>, as_shape<EI::shape>, axes<Axis>, fit_ok>::value;
}
/// The first idx.e[i] elements of x along every axis i.
template <dims S, class X, int... D>
constexpr auto crop_to(const X& x, std::integer_sequence<int, D...>) {
  if constexpr (sizeof...(D) == 0) {
    return as_expr(x);
  } else {
    constexpr int a = static_cast<int>(sizeof...(D)) - 1;  // the last axis (D is 0, 1, ...)
    constexpr dims xs = expr_t<X>::shape;
    const auto inner = crop_to<S>(x, std::make_integer_sequence<int, a>{});
    if constexpr (xs.e[a] == S.e[a]) return inner;
    else return slice<a, 0, S.e[a]>(inner);
  }
}
}  // namespace detail

/// torch.gather(x, Axis, index): out[..., i, ...] = x[..., index[..., i, ...], ...] along Axis,
/// shaped like index (integers, x's rank, extents at most x's on the other axes). An index
/// outside [0, x's extent) throws std::out_of_range when the graph runs. (gather(table, index)
/// without an axis is the embedding lookup: rows of table.) Gradient: scatter_add into x.
template <int Axis, tensor_operand X, tensor_operand I>
constexpr auto gather(const X& x, const I& index) {
  using E = detail::expr_t<X>;
  detail::along_errors<op::gather, Axis, E, detail::expr_t<I>, dims{}>();
  if constexpr (!detail::along_ok<Axis, E, detail::expr_t<I>, dims{}>()) return ex::invalid<E::dt>{};
  else return detail::take_along<detail::normal_axis(Axis, E::shape.rank), true>(x, index);
}

/// torch.scatter_add(x, Axis, index, src): x with src[..., i, ...] added at x[..., index[...,
/// i, ...], ...] along Axis (repeated indices add up); index as for gather<Axis>, and at most
/// src's extents on every axis (src's other elements are not read). An index outside [0, x's
/// extent) throws std::out_of_range. (scatter_add(index, src, like) is gather(table, index)'s
/// adjoint: rows.)
template <int Axis, tensor_operand X, tensor_operand I, tensor_operand S>
constexpr auto scatter_add(const X& x, const I& index, const S& src) {
  using E = detail::expr_t<X>;
  using EI = detail::expr_t<I>;
  detail::along_errors<op::scatter_add, Axis, E, EI, detail::expr_t<S>::shape>();
  if constexpr (!detail::along_ok<Axis, E, EI, detail::expr_t<S>::shape>()) {
    return ex::invalid<E::dt>{};
  } else {
    constexpr int r = E::shape.rank, a = detail::normal_axis(Axis, r);
    const auto xt = transpose<a, r - 1>(as_expr(x));
    const auto it = transpose<a, r - 1>(as_expr(index));
    const auto srct = transpose<a, r - 1>(
        to_dtype<E::dt>(detail::crop_to<EI::shape>(src, std::make_integer_sequence<int, r>{})));
    constexpr dims st = detail::expr_t<decltype(xt)>::shape;
    const auto added = scatter_add(detail::flat_indices<st, true>(it), srct, reshape<st.numel()>(xt));
    return x + transpose<a, r - 1>(detail::reshape_dims<st>(added));
  }
}

/// torch.sort(x, Axis, descending, stable=True): std::tuple{values, indices}; the values are
/// x gathered by argsort's indices, so their gradient goes back to where each came from.
template <int Axis = -1, bool Descending = false, tensor_operand X>
constexpr auto sort(const X& x) {
  using E = detail::expr_t<X>;
  constexpr int a = detail::normal_axis(Axis, E::shape.rank);
  const auto i = argsort<a, Descending>(x);
  return std::tuple{detail::take_along<a, false>(x, i), i};
}
/// torch.topk(x, K, Axis, largest): std::tuple{values, indices} of the K largest (smallest)
/// along Axis, in order; among equal values the first positions win.
template <index_t K, int Axis = -1, bool Largest = true, tensor_operand X>
constexpr auto topk(const X& x) {
  using E = detail::expr_t<X>;
  constexpr int a = detail::normal_axis(Axis, E::shape.rank);
  static_assert(E::shape.poisoned() || (K >= 0 && K <= E::shape.e[a]), "kiln::topk: K must be within the axis' extent");
  const auto i = slice<a, 0, K>(argsort<a, Largest>(x));
  return std::tuple{detail::take_along<a, false>(x, i), i};
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

namespace detail {
/// torch.tile's shapes: x's shape and the repetitions, each padded with leading 1s to rank n.
template <index_t... R>
struct tiling {
  static constexpr index_t reps[sizeof...(R)] = {R...};  // (a bound: clang 14 reads no unbounded array)
  static constexpr int count = static_cast<int>(sizeof...(R));
  static constexpr int rank(dims s) { return s.rank > count ? s.rank : count; }
  static constexpr index_t rep(int i, int n) { return i < n - count ? 1 : reps[i - (n - count)]; }
  static constexpr index_t extent(dims s, int i, int n) { return i < n - s.rank ? 1 : s.e[i - (n - s.rank)]; }
  /// [1, s0, 1, s1, ...] (Rep: [r0, s0, r1, s1, ...]), rank 2n
  template <bool Rep>
  static constexpr dims spread(dims s) {
    const int n = rank(s);
    dims out;
    out.rank = 2 * n;
    for (int i = 0; i < n; ++i) {
      out.e[2 * i] = Rep ? rep(i, n) : 1;
      out.e[2 * i + 1] = extent(s, i, n);
    }
    return out;
  }
  static constexpr dims result(dims s) {
    const int n = rank(s);
    dims out;
    out.rank = n;
    for (int i = 0; i < n; ++i) out.e[i] = rep(i, n) * extent(s, i, n);
    return out;
  }
};
}  // namespace detail
/// torch.tile(x, (R...)): x repeated R_i times along each axis (the repetitions and x's shape
/// padded with leading 1s to the same rank), through a broadcast: its gradient sums the copies.
template <index_t... R, tensor_operand X>
constexpr auto tile(const X& x) {
  using E = detail::expr_t<X>;
  using T = detail::tiling<R...>;
  static_assert(sizeof...(R) > 0, "kiln::tile: give at least one repetition count");
  static_assert(((R >= 0) && ...), "kiln::tile: repetition counts must not be negative");
  static_assert(2 * T::rank(E::shape) <= max_rank, "kiln::tile: the result's rank times 2 must not exceed max_rank");
  static_assert(E::shape.poisoned() || E::shape.is_static(), "kiln::tile: the operand's extents must be static");
  constexpr dims ones = T::template spread<false>(E::shape), reps = T::template spread<true>(E::shape);
  constexpr dims out = T::result(E::shape);
  return detail::reshape_dims<out>(detail::broadcast_dims<reps>(detail::reshape_dims<ones>(x)));
}
/// torch.Tensor.repeat(R...): tile with at least as many counts as x has axes.
template <index_t... R, tensor_operand X>
constexpr auto repeat(const X& x) {
  static_assert(static_cast<int>(sizeof...(R)) >= detail::expr_t<X>::shape.rank,
                "kiln::repeat: give a repetition count for every axis (torch.tile pads them)");
  return tile<R...>(x);
}

namespace detail {
/// The padding value v in dtype D: a run-time scalar, or a literal (kiln's own constants, which
/// keep the expression pure).
template <dtype D, class V>
constexpr auto fill_value(V v) {
  if constexpr (scalar_operand<V>) return make_scalar<D>(v);
  else return to_dtype<D>(v);
}
/// x padded along axis a with Before and After values v.
template <int A, index_t Width, class X, class V>
constexpr auto pad_block(const X& x, V v) {
  using E = expr_t<X>;
  const auto f = fill_value<E::dt>(v);
  if constexpr (E::shape.is_static()) {
    return broadcast_dims<with_extent(E::shape, A, Width)>(f);
  } else {  // a dyn extent comes from x: v shaped like a slice of x, then widened
    static_assert(E::shape.poisoned() || E::shape.e[A] > 0, "kiln::pad: a dyn shape needs a nonempty padded axis");
    const auto s = slice<A, 0, 1>(x);
    return broadcast_dims<with_extent(E::shape, A, Width)>(where(max(eq(s, s), ne(s, s)), f, f));
  }
}
template <int A, index_t Before, index_t After, class X, class V>
constexpr auto pad_axis(const X& x, V v) {
  using E = expr_t<X>;
  static_assert(E::shape.poisoned() || E::shape.e[A] != dyn, "kiln::pad: a padded axis must have a static extent");
  const auto e = as_expr(x);
  if constexpr (Before == 0 && After == 0) return e;
  else if constexpr (Before == 0) return concat<A>(e, pad_block<A, After>(e, v));
  else if constexpr (After == 0) return concat<A>(pad_block<A, Before>(e, v), e);
  else return concat<A>(pad_block<A, Before>(e, v), e, pad_block<A, After>(e, v));
}
template <int A, index_t Before, index_t After, index_t... Rest, class X, class V>
constexpr auto pad_axes(const X& x, V v) {
  const auto y = pad_axis<A, Before, After>(x, v);
  if constexpr (sizeof...(Rest) == 0) return y;
  else return pad_axes<A - 1, Rest...>(y, v);
}
}  // namespace detail
/// torch.nn.functional.pad(x, (P...), value=v) in constant mode: pairs (before, after) for the
/// last axis, then the one before it, and so on, as PyTorch orders them; padding >= 0.
template <index_t... P, tensor_operand X, class V = double>
  requires scalar_operand<V>
constexpr auto pad(const X& x, V value = 0) {
  using E = detail::expr_t<X>;
  static_assert(sizeof...(P) % 2 == 0 && sizeof...(P) > 0, "kiln::pad: give (before, after) pairs, last axis first");
  static_assert(E::shape.poisoned() || static_cast<int>(sizeof...(P)) / 2 <= E::shape.rank,
                "kiln::pad: more pairs than the operand has axes");
  static_assert(((P >= 0) && ...), "kiln::pad: padding must not be negative (slice to crop)");
  return detail::pad_axes<E::shape.rank - 1, P...>(x, value);
}

/// torch.split(x, Size, Axis): a std::tuple of the slices of Size along Axis (the last one
/// shorter where Size does not divide the extent), for structured bindings.
template <index_t Size, int Axis = 0, tensor_operand X>
constexpr auto split(const X& x) {
  using E = detail::expr_t<X>;
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || (r > 0 && detail::axes_valid<Axis>(r)), "kiln::split: axis out of range");
  constexpr int a = detail::normal_axis(Axis, r);
  constexpr index_t n = E::shape.e[a];
  static_assert(n != dyn, "kiln::split: the axis must have a static extent");
  static_assert(Size > 0, "kiln::split: the size must be positive");
  constexpr index_t count = n == 0 ? 1 : (n + Size - 1) / Size;
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::tuple{slice<a, static_cast<index_t>(I) * Size,
                            (static_cast<index_t>(I) + 1) * Size < n ? (static_cast<index_t>(I) + 1) * Size : n>(x)...};
  }(std::make_index_sequence<static_cast<std::size_t>(count)>{});
}
/// torch.chunk(x, Chunks, Axis): split into pieces of ceil(n / Chunks) (so possibly fewer than
/// Chunks pieces, as PyTorch).
template <index_t Chunks, int Axis = 0, tensor_operand X>
constexpr auto chunk(const X& x) {
  using E = detail::expr_t<X>;
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || (r > 0 && detail::axes_valid<Axis>(r)), "kiln::chunk: axis out of range");
  static_assert(Chunks > 0, "kiln::chunk: the number of chunks must be positive");
  constexpr index_t n = E::shape.e[detail::normal_axis(Axis, r)];
  constexpr index_t size = n <= 0 ? 1 : (n + Chunks - 1) / Chunks;
  return split<size, Axis>(x);
}
/// torch.unbind(x, Axis): a std::tuple of the slices along Axis, each without that axis.
template <int Axis = 0, tensor_operand X>
constexpr auto unbind(const X& x) {
  using E = detail::expr_t<X>;
  constexpr int r = E::shape.rank;
  static_assert(E::shape.poisoned() || (r > 0 && detail::axes_valid<Axis>(r)), "kiln::unbind: axis out of range");
  constexpr int a = detail::normal_axis(Axis, r);
  static_assert(E::shape.e[a] != dyn, "kiln::unbind: the axis must have a static extent");
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::tuple{squeeze<a>(slice<a, static_cast<index_t>(I), static_cast<index_t>(I) + 1>(x))...};
  }(std::make_index_sequence<static_cast<std::size_t>(E::shape.e[a])>{});
}

namespace detail {
/// What is wrong with an einsum equation (or its operands' shapes).
enum class einsum_error {
  none, too_many_operands, bad_output, rank_too_large, bad_character, operand_count,
  rank_mismatch, dyn_extent, extent_mismatch, unknown_output_letter, intermediate_rank, internal
};

/// An einsum equation parsed, and the plan that computes it: the letters each operand sums by
/// itself, then (two operands) a batched matmul [batch, m, k] x [batch, k, n] of the operands
/// permuted and reshaped, and the permutation of its result to the output's letters.
struct einsum_plan {
  einsum_error error = einsum_error::none;  ///< the first thing wrong with the equation or the shapes
  int operands = 0;
  char letters[2][max_rank]{};  ///< each operand's letters, in order
  int rank[2]{};
  char out[max_rank]{};
  int out_rank = 0;
  std::uint32_t summed[2]{};   ///< axes an operand sums by itself (letters nowhere else)
  int perm[2][max_rank]{};     ///< each operand's remaining axes: [batch, free (a) / contracted (b), ...]
  int kept[2]{};
  index_t batch = 1, m = 1, k = 1, n = 1;
  dims mid;                    ///< the product's shape before the last permutation: [batch, a free, b free]
  char mid_letters[max_rank]{};
  int out_perm[max_rank]{};
};

constexpr bool has_letter(const char* s, int n, char c) {
  for (int i = 0; i < n; ++i)
    if (s[i] == c) return true;
  return false;
}

/// How many operands einsum takes (torch.einsum takes any number; each is a contraction here).
inline constexpr int einsum_max_operands = 8;

/// An einsum equation's terms as plain letters: "..." spelled out as letters the equation does
/// not use (right-aligned across operands, first in an implicit output, absent from an explicit
/// output that leaves it out), and an implicit output made explicit ("..." first, then the
/// letters written once, alphabetically), torch.einsum's rules. Letters may still repeat within
/// an operand (a diagonal).
struct einsum_terms {
  einsum_error error = einsum_error::none;
  int operands = 0;
  char letters[einsum_max_operands][max_rank]{};
  int rank[einsum_max_operands]{};
  char out[max_rank]{};
  int out_rank = 0;
};

constexpr bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

template <fixed_string Eq>
constexpr einsum_terms parse_einsum(const dims* shapes, int operands) {
  einsum_terms r;
  const std::string_view eq = Eq.view();
  if (operands > einsum_max_operands) return r.error = einsum_error::too_many_operands, r;
  // each term's letters, with '.' standing for "..." (at most one each); the output is term O
  constexpr int O = einsum_max_operands;
  char terms[O + 1][max_rank + 1]{};
  int len[O + 1]{};
  bool ellipsis[O + 1]{};
  int t = 0;
  bool arrow = false, used[128]{};
  for (std::size_t i = 0; i < eq.size(); ++i) {
    const char c = eq[i];
    if (c == ' ') continue;
    if (c == ',' && !arrow) {
      if (++t >= O) return r.error = einsum_error::too_many_operands, r;
    } else if (c == '-' && i + 1 < eq.size() && eq[i + 1] == '>' && !arrow) {
      arrow = true;
      t = O;
      ++i;
    } else if (c == '.' && i + 2 < eq.size() && eq[i + 1] == '.' && eq[i + 2] == '.' && !ellipsis[t]) {
      ellipsis[t] = true;
      if (len[t] == max_rank + 1) return r.error = einsum_error::rank_too_large, r;
      terms[t][len[t]++] = '.';
      i += 2;
    } else if (is_letter(c)) {
      if (len[t] == max_rank + 1) return r.error = einsum_error::rank_too_large, r;
      terms[t][len[t]++] = c;
      used[static_cast<int>(c)] = true;
    } else {
      return r.error = einsum_error::bad_character, r;
    }
  }
  int count = 1;
  for (char c : eq) count += c == ',';
  if (count != operands) return r.error = einsum_error::operand_count, r;
  // "..." as letters: the most dims any operand's covers, right-aligned
  int ne = 0, own[O]{};
  for (int o = 0; o < operands; ++o) {
    own[o] = shapes[o].rank - (len[o] - (ellipsis[o] ? 1 : 0));
    if (own[o] < 0 || (!ellipsis[o] && own[o] != 0)) return r.error = einsum_error::rank_mismatch, r;
    ne = own[o] > ne ? own[o] : ne;
  }
  char fresh[max_rank]{};
  for (int c = 0, k = 0; c < 128 && k < ne; ++c)
    if (is_letter(static_cast<char>(c)) && !used[c]) fresh[k++] = static_cast<char>(c);
  auto spell = [&](int term, char* into, int& rank, int own_dims) {
    for (int i = 0; i < len[term]; ++i) {
      if (terms[term][i] != '.') {
        if (rank == max_rank) return false;
        into[rank++] = terms[term][i];
      } else {
        for (int k = ne - own_dims; k < ne; ++k) {
          if (rank == max_rank) return false;
          into[rank++] = fresh[k];
        }
      }
    }
    return true;
  };
  r.operands = operands;
  for (int o = 0; o < operands; ++o)
    if (!spell(o, r.letters[o], r.rank[o], own[o])) return r.error = einsum_error::rank_too_large, r;
  if (arrow) {
    if (!spell(O, r.out, r.out_rank, ne)) return r.error = einsum_error::rank_too_large, r;
  } else {
    for (int k = 0; k < ne; ++k) r.out[r.out_rank++] = fresh[k];
    for (int c = 0; c < 128; ++c) {
      if (!is_letter(static_cast<char>(c)) || !used[c]) continue;
      int n = 0;
      for (int o = 0; o < operands; ++o)
        for (int a = 0; a < r.rank[o]; ++a) n += r.letters[o][a] == c;
      if (n == 1) {
        if (r.out_rank == max_rank) return r.error = einsum_error::rank_too_large, r;
        r.out[r.out_rank++] = static_cast<char>(c);
      }
    }
  }
  return r;
}

/// An einsum equation of one or two operands made plain for plan_einsum: its terms
/// (parse_einsum), a letter repeated in one operand taken as a diagonal, and extents of 1
/// broadcast to the letter's extent elsewhere (torch.einsum's rules).
struct einsum_prep {
  einsum_error error = einsum_error::none;
  int operands = 0;
  char letters[3][max_rank]{};    ///< the plain equation: each operand's letters, then the output's,
  int rank[3]{};                  ///< none twice in one term
  int diag_count[2]{};            ///< per operand, its diagonals taken in order: axes (a, b), a < b,
  int diag[2][max_rank][2]{};     ///< each moving the diagonal to the last axis
  dims target[2];                 ///< each operand's shape after its diagonals, broadcast
};

template <fixed_string Eq>
constexpr einsum_prep prep_einsum(dims s0, dims s1, int operands) {
  einsum_prep q;
  const dims shapes[2] = {s0, s1};
  const einsum_terms terms = parse_einsum<Eq>(shapes, operands);
  if (terms.error != einsum_error::none) return q.error = terms.error, q;
  char letters[3][max_rank]{};
  int rank[3]{terms.rank[0], terms.rank[1], terms.out_rank};
  for (int o = 0; o < 3; ++o)
    for (int a = 0; a < rank[o]; ++a) letters[o][a] = o == 2 ? terms.out[a] : terms.letters[o][a];
  // diagonals: a letter twice in an operand; the extents of each letter, broadcast from 1
  index_t extent[128]{};
  for (int c = 0; c < 128; ++c) extent[c] = -2;
  for (int o = 0; o < operands; ++o) {
    dims s = shapes[o];
    for (int a = 0; a < rank[o]; ++a)
      if (s.e[a] == dyn) return q.error = einsum_error::dyn_extent, q;
    for (bool again = true; again;) {
      again = false;
      for (int a = 0; a < rank[o] && !again; ++a)
        for (int b = a + 1; b < rank[o] && !again; ++b)
          if (letters[o][a] == letters[o][b]) {
            if (s.e[a] != s.e[b]) return q.error = einsum_error::extent_mismatch, q;
            if (q.diag_count[o] == max_rank) return q.error = einsum_error::internal, q;
            q.diag[o][q.diag_count[o]][0] = a;
            q.diag[o][q.diag_count[o]++][1] = b;
            const char c = letters[o][a];
            const index_t e = s.e[a];
            dims r;
            char l[max_rank]{};
            for (int i = 0; i < rank[o]; ++i)
              if (i != a && i != b) l[r.rank] = letters[o][i], r.e[r.rank++] = s.e[i];
            l[r.rank] = c;
            r.e[r.rank++] = e;
            for (int i = 0; i < r.rank; ++i) letters[o][i] = l[i];
            rank[o] = r.rank;
            s = r;
            again = true;
          }
    }
    q.target[o] = s;
    for (int a = 0; a < rank[o]; ++a) {
      index_t& x = extent[static_cast<int>(letters[o][a])];
      const index_t e = s.e[a];
      if (x == -2 || x == 1) x = e;
      else if (e != 1 && e != x) return q.error = einsum_error::extent_mismatch, q;
    }
  }
  for (int o = 0; o < operands; ++o)
    for (int a = 0; a < rank[o]; ++a) q.target[o].e[a] = extent[static_cast<int>(letters[o][a])];
  q.operands = operands;
  for (int o = 0; o < 3; ++o) {
    q.rank[o] = rank[o];
    for (int a = 0; a < rank[o]; ++a) q.letters[o][a] = letters[o][a];
  }
  return q;
}

/// x's diagonal over axes A < B (equal extents n) as its last axis: the two moved last,
/// flattened to n n, every (n + 1)-th element.
template <int A, int B, class X>
constexpr auto diagonal_last(const X& x) {
  constexpr dims s = expr_t<X>::shape;
  constexpr index_t n = s.e[A];
  constexpr auto perm = [] {
    constexpr dims sh = expr_t<X>::shape;
    std::array<int, max_rank> p{};
    int k = 0;
    for (int i = 0; i < sh.rank; ++i)
      if (i != A && i != B) p[static_cast<std::size_t>(k++)] = i;
    p[static_cast<std::size_t>(k++)] = A;
    p[static_cast<std::size_t>(k)] = B;
    return p;
  }();
  constexpr dims flat = [] {
    constexpr dims sh = expr_t<X>::shape;
    dims f;
    f.rank = 0;
    for (int i = 0; i < sh.rank; ++i)
      if (i != A && i != B) f.e[f.rank++] = sh.e[i];
    f.e[f.rank++] = sh.e[A] * sh.e[A];
    return f;
  }();
  const auto moved = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return permute<perm[I]...>(x);
  }(std::make_index_sequence<static_cast<std::size_t>(s.rank)>{});
  return slice<flat.rank - 1, 0, n * n, n + 1>(reshape_dims<flat>(moved));
}
/// Operand O of an einsum with its diagonals taken and its extents of 1 broadcast.
template <einsum_prep Q, int O, int I = 0, class X>
constexpr auto einsum_operand(const X& x) {
  if constexpr (I < Q.diag_count[O]) {
    return einsum_operand<Q, O, I + 1>(diagonal_last<Q.diag[O][I][0], Q.diag[O][I][1]>(x));
  } else {
    if constexpr (expr_t<X>::shape == Q.target[O]) return as_expr(x);
    else return broadcast_dims<Q.target[O]>(x);
  }
}

/// The plan of a plain equation (einsum_prep's letters, its operands' target shapes).
constexpr einsum_plan plan_einsum(const einsum_prep& q) {
  einsum_plan p;
  if (q.error != einsum_error::none) return p.error = q.error, p;
  p.operands = q.operands;
  for (int o = 0; o < q.operands; ++o) {
    p.rank[o] = q.rank[o];
    for (int a = 0; a < q.rank[o]; ++a) p.letters[o][a] = q.letters[o][a];
  }
  for (int i = 0; i < q.rank[2]; ++i) {
    if (has_letter(p.out, p.out_rank, q.letters[2][i])) return p.error = einsum_error::bad_output, p;
    p.out[p.out_rank++] = q.letters[2][i];
  }
  const dims* shapes = q.target;
  // the extent of each letter, the same wherever it appears
  // the extent of each letter (the targets agree: einsum_prep broadcast them)
  index_t extent[128]{};
  for (int c = 0; c < 128; ++c) extent[c] = -2;
  for (int o = 0; o < p.operands; ++o)
    for (int a = 0; a < p.rank[o]; ++a) extent[static_cast<int>(p.letters[o][a])] = shapes[o].e[a];
  for (int i = 0; i < p.out_rank; ++i)
    if (extent[static_cast<int>(p.out[i])] == -2) return p.error = einsum_error::unknown_output_letter, p;
  auto in_other = [&](int o, char c) { return p.operands == 2 && has_letter(p.letters[1 - o], p.rank[1 - o], c); };
  auto in_out = [&](char c) { return has_letter(p.out, p.out_rank, c); };
  // each operand: sum the letters found nowhere else; order the rest
  for (int o = 0; o < p.operands; ++o)
    for (int a = 0; a < p.rank[o]; ++a)
      if (!in_other(o, p.letters[o][a]) && !in_out(p.letters[o][a])) p.summed[o] |= 1u << a;
  // kept axes of operand o by their index among the kept (after the sum)
  auto kept_index = [&](int o, int a) {
    int k = 0;
    for (int b = 0; b < a; ++b) k += (p.summed[o] & (1u << b)) == 0;
    return k;
  };
  int mid = 0;
  if (p.operands == 1) {
    for (int a = 0; a < p.rank[0]; ++a)
      if (!(p.summed[0] & (1u << a))) p.mid_letters[mid++] = p.letters[0][a];
  } else {
    // batch letters (both operands and the output), in the output's order
    for (int i = 0; i < p.out_rank; ++i)
      if (has_letter(p.letters[0], p.rank[0], p.out[i]) && has_letter(p.letters[1], p.rank[1], p.out[i])) {
        p.mid_letters[mid++] = p.out[i];
        p.batch *= extent[static_cast<int>(p.out[i])];
      }
    const int nb = mid;
    char contracted[max_rank]{};
    int nk = 0;
    for (int a = 0; a < p.rank[0]; ++a) {
      const char c = p.letters[0][a];
      if (in_other(0, c) && !in_out(c)) contracted[nk++] = c, p.k *= extent[static_cast<int>(c)];
    }
    for (int a = 0; a < p.rank[0]; ++a) {  // a's free letters
      const char c = p.letters[0][a];
      if (!in_other(0, c) && in_out(c)) p.mid_letters[mid++] = c, p.m *= extent[static_cast<int>(c)];
    }
    for (int a = 0; a < p.rank[1]; ++a) {  // b's free letters
      const char c = p.letters[1][a];
      if (!in_other(1, c) && in_out(c)) p.mid_letters[mid++] = c, p.n *= extent[static_cast<int>(c)];
    }
    // operand permutations: a [batch, a free, contracted], b [batch, contracted, b free]
    for (int o = 0; o < 2; ++o) {
      int q = 0;
      auto put = [&](char c) {
        for (int a = 0; a < p.rank[o]; ++a)
          if (p.letters[o][a] == c) p.perm[o][q++] = kept_index(o, a);
      };
      for (int i = 0; i < nb; ++i) put(p.mid_letters[i]);
      if (o == 0)
        for (int i = nb; i < mid; ++i)
          if (has_letter(p.letters[0], p.rank[0], p.mid_letters[i])) put(p.mid_letters[i]);
      for (int i = 0; i < nk; ++i) put(contracted[i]);
      if (o == 1)
        for (int i = nb; i < mid; ++i)
          if (has_letter(p.letters[1], p.rank[1], p.mid_letters[i]) && !has_letter(p.letters[0], p.rank[0], p.mid_letters[i]))
            put(p.mid_letters[i]);
      p.kept[o] = q;
    }
  }
  if (p.operands == 1) {
    p.kept[0] = mid;
    for (int i = 0; i < mid; ++i) p.perm[0][i] = i;
  }
  p.mid.rank = mid;
  for (int i = 0; i < mid; ++i) p.mid.e[i] = extent[static_cast<int>(p.mid_letters[i])];
  if (mid != p.out_rank) return p.error = einsum_error::internal, p;
  for (int i = 0; i < p.out_rank; ++i)
    for (int j = 0; j < mid; ++j)
      if (p.mid_letters[j] == p.out[i]) p.out_perm[i] = j;
  return p;
}

/// An einsum of three or more operands as pairwise einsums, contracted left to right as
/// torch.einsum does without opt_einsum: step i (1 .. n-1) is "acc,op_i->keep", keep being the
/// letters of acc and op_i that the output or a later operand has (the output at the last step),
/// so that each letter is summed at the first step after which nothing needs it.
struct einsum_chain {
  einsum_error error = einsum_error::none;
  char eq[einsum_max_operands][3 * max_rank + 4]{};
  int len[einsum_max_operands]{};
};

constexpr einsum_chain chain_einsum(const einsum_terms& t) {
  einsum_chain c;
  if (t.error != einsum_error::none) return c.error = t.error, c;
  char acc[max_rank]{};
  int na = t.rank[0];
  for (int a = 0; a < na; ++a) acc[a] = t.letters[0][a];
  for (int i = 1; i < t.operands; ++i) {
    char keep[max_rank]{};
    int nk = 0;
    if (i == t.operands - 1) {
      for (int a = 0; a < t.out_rank; ++a) keep[nk++] = t.out[a];
    } else {
      auto needed = [&](char ch) {
        if (has_letter(t.out, t.out_rank, ch)) return true;
        for (int j = i + 1; j < t.operands; ++j)
          if (has_letter(t.letters[j], t.rank[j], ch)) return true;
        return false;
      };
      const char* from[2] = {acc, t.letters[i]};
      const int n[2] = {na, t.rank[i]};
      for (int o = 0; o < 2; ++o)
        for (int a = 0; a < n[o]; ++a) {
          const char ch = from[o][a];
          if (has_letter(keep, nk, ch) || !needed(ch)) continue;
          if (nk == max_rank) return c.error = einsum_error::intermediate_rank, c;
          keep[nk++] = ch;
        }
    }
    int& k = c.len[i];
    for (int a = 0; a < na; ++a) c.eq[i][k++] = acc[a];
    c.eq[i][k++] = ',';
    for (int a = 0; a < t.rank[i]; ++a) c.eq[i][k++] = t.letters[i][a];
    c.eq[i][k++] = '-';
    c.eq[i][k++] = '>';
    for (int a = 0; a < nk; ++a) c.eq[i][k++] = acc[a] = keep[a];
    na = nk;
  }
  return c;
}
/// Step I's equation of chain C as a template argument.
template <einsum_chain C, int I>
constexpr auto chain_equation() {
  fixed_string<static_cast<std::size_t>(C.len[I]) + 1> f;
  for (int k = 0; k < C.len[I]; ++k) f.chars[k] = C.eq[I][k];
  return f;
}

/// One static_assert per mistake, so that the compiler prints which (and, in the line above it,
/// the operands' shapes).
template <einsum_error E, class... Shapes>
constexpr bool einsum_ok() {
  static_assert(E != einsum_error::too_many_operands, "kiln::einsum: at most 8 operands (einsum_max_operands)");
  static_assert(E != einsum_error::bad_output, "kiln::einsum: an output letter twice, or more than max_rank");
  static_assert(E != einsum_error::rank_too_large, "kiln::einsum: more letters than max_rank");
  static_assert(E != einsum_error::bad_character,
                "kiln::einsum: the equation has a character other than letters, ',', '->', '...' (once a term) and "
                "spaces");
  static_assert(E != einsum_error::operand_count, "kiln::einsum: the equation names another number of operands");
  static_assert(E != einsum_error::rank_mismatch, "kiln::einsum: an operand's letters do not match its rank");
  static_assert(E != einsum_error::dyn_extent, "kiln::einsum: static extents only");
  static_assert(E != einsum_error::extent_mismatch,
                "kiln::einsum: a letter with two different extents (other than 1, which broadcasts)");
  static_assert(E != einsum_error::unknown_output_letter, "kiln::einsum: an output letter that no operand has");
  static_assert(E != einsum_error::intermediate_rank,
                "kiln::einsum: contracted left to right, an intermediate result has more letters than max_rank");
  static_assert(E != einsum_error::internal, "kiln::einsum: internal: the kept letters are not the output's");
  return E == einsum_error::none;
}

template <auto Axes, class X, std::size_t... I>
constexpr auto permute_by(const X& x, std::index_sequence<I...>) {
  if constexpr (sizeof...(I) == 0) return as_expr(x);
  else return permute<Axes[I]...>(x);
}
template <std::uint32_t Mask, class X>
constexpr auto sum_mask(const X& x) {
  if constexpr (Mask == 0) {
    return as_expr(x);
  } else {
    constexpr auto axes = [] {
      std::array<int, max_rank> a{};
      int n = 0;
      for (int i = 0; i < max_rank; ++i)
        if (Mask & (1u << i)) a[static_cast<std::size_t>(n++)] = i;
      return std::pair{a, n};
    }();
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return sum<axes.first[I]...>(x);
    }(std::make_index_sequence<static_cast<std::size_t>(axes.second)>{});
  }
}
template <einsum_plan P, int O>
inline constexpr auto operand_perm = [] {
  std::array<int, max_rank> a{};
  for (int i = 0; i < P.kept[O]; ++i) a[static_cast<std::size_t>(i)] = P.perm[O][i];
  return a;
}();
template <einsum_plan P>
inline constexpr auto output_perm = [] {
  std::array<int, max_rank> a{};
  for (int i = 0; i < P.out_rank; ++i) a[static_cast<std::size_t>(i)] = P.out_perm[i];
  return a;
}();
}  // namespace detail

/// torch.einsum(Eq, a[, b]) (three to eight operands: below): letters for axes, "..." for the
/// axes no letter names (broadcast across operands, right-aligned), an optional "->output" (else "..." and
/// then the letters that appear once, alphabetically). A letter twice in one operand takes a
/// diagonal; an extent of 1 broadcasts against the letter's extent elsewhere. Letters an operand
/// has alone are summed first; two operands are then one batched matmul of the operands
/// permuted and reshaped to [batch, m, k] and [batch, k, n] (batch: letters of both and the
/// output; k: of both, not the output), whose result is permuted to the output. Static extents.
template <fixed_string Eq, tensor_operand A>
constexpr auto einsum(const A& a) {
  using EA = detail::expr_t<A>;
  constexpr detail::einsum_prep q = detail::prep_einsum<Eq>(EA::shape, dims{}, 1);
  constexpr detail::einsum_plan p = detail::plan_einsum(q);
  if constexpr (!detail::einsum_ok<p.error, as_shape<EA::shape>>()) {
    return ex::invalid<EA::dt>{};
  } else {
    const auto s = detail::sum_mask<p.summed[0]>(detail::einsum_operand<q, 0>(a));
    return detail::permute_by<detail::output_perm<p>>(s, std::make_index_sequence<static_cast<std::size_t>(p.out_rank)>{});
  }
}
template <fixed_string Eq, tensor_operand A, tensor_operand B>
constexpr auto einsum(const A& a, const B& b) {
  using EA = detail::expr_t<A>;
  using EB = detail::expr_t<B>;
  constexpr detail::einsum_prep q = detail::prep_einsum<Eq>(EA::shape, EB::shape, 2);
  constexpr detail::einsum_plan p = detail::plan_einsum(q);
  if constexpr (!detail::einsum_ok<p.error, as_shape<EA::shape>, as_shape<EB::shape>>()) {
    return ex::invalid<promote(EA::dt, EB::dt)>{};
  } else {
    const auto sa = detail::permute_by<detail::operand_perm<p, 0>>(
        detail::sum_mask<p.summed[0]>(detail::einsum_operand<q, 0>(a)),
        std::make_index_sequence<static_cast<std::size_t>(p.kept[0])>{});
    const auto sb = detail::permute_by<detail::operand_perm<p, 1>>(
        detail::sum_mask<p.summed[1]>(detail::einsum_operand<q, 1>(b)),
        std::make_index_sequence<static_cast<std::size_t>(p.kept[1])>{});
    const auto prod = matmul(detail::reshape_dims<dims{p.batch, p.m, p.k}>(sa), detail::reshape_dims<dims{p.batch, p.k, p.n}>(sb));
    const auto mid = detail::reshape_dims<p.mid>(prod);
    return detail::permute_by<detail::output_perm<p>>(mid, std::make_index_sequence<static_cast<std::size_t>(p.out_rank)>{});
  }
}

namespace detail {
template <einsum_chain C, int I, class Acc, class Op, class... Rest>
constexpr auto einsum_steps(const Acc& acc, const Op& op, const Rest&... rest) {
  const auto next = einsum<chain_equation<C, I>()>(acc, op);
  if constexpr (sizeof...(Rest) == 0) return next;
  else return einsum_steps<C, I + 1>(next, rest...);
}
}  // namespace detail
/// torch.einsum of three to eight operands: the same equations, contracted left to right, a pair
/// at a time (detail::einsum_chain), each pair as above.
template <fixed_string Eq, tensor_operand A, tensor_operand B, tensor_operand C, tensor_operand... R>
constexpr auto einsum(const A& a, const B& b, const C& c, const R&... r) {
  constexpr int n = 3 + static_cast<int>(sizeof...(R));
  constexpr std::array<dims, static_cast<std::size_t>(n)> shapes{detail::expr_t<A>::shape, detail::expr_t<B>::shape,
                                                                 detail::expr_t<C>::shape, detail::expr_t<R>::shape...};
  constexpr detail::einsum_chain chain = detail::chain_einsum(detail::parse_einsum<Eq>(shapes.data(), n));
  if constexpr (!detail::einsum_ok<chain.error, as_shape<detail::expr_t<A>::shape>, as_shape<detail::expr_t<B>::shape>,
                                   as_shape<detail::expr_t<C>::shape>, as_shape<detail::expr_t<R>::shape>...>()) {
    constexpr dtype d = [] {
      dtype x = promote(promote(detail::expr_t<A>::dt, detail::expr_t<B>::dt), detail::expr_t<C>::dt);
      ((x = promote(x, detail::expr_t<R>::dt)), ...);
      return x;
    }();
    return ex::invalid<d>{};
  } else {
    return detail::einsum_steps<chain, 1>(as_expr(a), b, c, r...);
  }
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
/// How a loss reduces its per-row values (PyTorch's `reduction=`): their mean (weighted, where
/// the loss has weights), their sum, or none (a value per row).
enum class reduction { mean, sum, none };
/// cross_entropy's options beyond the defaults (PyTorch's arguments of the same names).
struct cross_entropy_options {
  std::int64_t ignore_index = -100;  ///< rows with this label count nowhere
  double label_smoothing = 0;        ///< the target mixes in this much of the uniform distribution
};
namespace detail {
/// torch.nn.functional.cross_entropy(logits, labels, weight, ignore_index, reduction,
/// label_smoothing) as PyTorch computes it: from log_softmax, (1 - e) nll + e / C smooth, where
/// nll_i = -w[y_i] logp[i, y_i] and smooth_i = -sum_c w[c] logp[i, c], both 0 on ignored rows;
/// the mean divides both sums by the kept rows' sum of w[y_i] (their count without weights).
template <reduction R, bool Weighted, class L, class Y, class W>
constexpr auto cross_entropy_with(const L& logits, const Y& labels, const W& weight, cross_entropy_options o) {
  using EL = expr_t<L>;
  using EY = expr_t<Y>;
  static_assert(EL::shape.rank == 2 && EY::shape.rank == 1, "kiln::cross_entropy: logits [N, C] and labels [N]");
  static_assert(is_integral(EY::dt) && EY::dt != dtype::boolean, "kiln::cross_entropy: the labels must be integers");
  constexpr index_t classes = EL::shape.e[1];
  static_assert(classes != dyn, "kiln::cross_entropy: the number of classes must be static");
  const auto logp = log_softmax<1>(as_float(logits));
  constexpr dtype d = decltype(logp)::dt;
  const auto zero = k<d, 0>;
  const auto pick = eq(arange_like<1>(logp), reshape_dims<dims{EY::shape.e[0], 1}>(labels));  // [N, C]
  const auto kept = ne(labels, o.ignore_index);                                                 // [N]
  const auto [w_label, smooth] = [&] {
    if constexpr (Weighted) {
      using EW = expr_t<W>;
      static_assert(EW::shape.rank == 1 && EW::shape.e[0] == classes,
                    "kiln::cross_entropy: the weights must be a vector [C], a weight per class");
      const auto w = reshape_dims<dims{1, classes}>(to_dtype<d>(as_expr(weight)));
      return std::pair{where(kept, sum<1>(where(pick, w, zero)), zero), -sum<1>(logp * w)};
    } else {
      return std::pair{cast<d>(kept), -sum<1>(logp)};
    }
  }();
  const auto nll = where(kept, -sum<1>(where(pick, logp, zero)), zero) * w_label;
  const auto smooth_kept = where(kept, smooth, zero);
  const double e = o.label_smoothing;
  if constexpr (R == reduction::none) {
    return nll * (1 - e) + smooth_kept * (e / static_cast<double>(classes));
  } else if constexpr (R == reduction::sum) {
    return sum(nll) * (1 - e) + sum(smooth_kept) * (e / static_cast<double>(classes));
  } else {
    const auto total = sum(w_label);
    return (sum(nll) * (1 - e) + sum(smooth_kept) * (e / static_cast<double>(classes))) / total;
  }
}
}  // namespace detail
/// cross_entropy with PyTorch's options: `cross_entropy<reduction::sum>(logits, labels,
/// {.ignore_index = 0, .label_smoothing = 0.1})`, and with a weight per class
/// `cross_entropy(logits, labels, weight[, options])`. (Without options, the fused
/// cross_entropy(logits, labels) of graph/expr.hpp.)
template <reduction R = reduction::mean, tensor_operand L, tensor_operand Y>
constexpr auto cross_entropy(const L& logits, const Y& labels, cross_entropy_options o) {
  return detail::cross_entropy_with<R, false>(logits, labels, 0, o);
}
template <reduction R = reduction::mean, tensor_operand L, tensor_operand Y, tensor_operand W>
constexpr auto cross_entropy(const L& logits, const Y& labels, const W& weight, cross_entropy_options o = {}) {
  return detail::cross_entropy_with<R, true>(logits, labels, weight, o);
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
