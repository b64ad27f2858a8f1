// kiln/graph/expr_nn.hpp: capture of the ops that small CNNs, embeddings, dropout and
// attention need: 2-D windows (unfold, fold, conv2d, max_pool2d, avg_pool2d), indexing (gather,
// embedding, scatter_add), counter-based random numbers (rand_like, dropout) and
// scaled_dot_product_attention.
//
//   auto y = relu(conv2d<1, 1>(x, w, b));          // stride 1, padding 1; x [n, c, h, w]
//   auto p = max_pool2d<2>(y);                      // 2x2 windows, stride 2
//   auto e = embedding(tokens, table);              // rows of table [v, d] named by tokens
//   auto d = dropout<"drop1", 50>(h, seed);          // p = 50/100; seed: kiln::seed_input
//   auto a = scaled_dot_product_attention<causal>(q, k, v);  // q [b, h, t, d], k, v [b, hk, t, d]
//
// conv2d and the poolings are high-level ops: the eager backend runs them directly (the
// reference), the decomposition pass turns them into unfold (im2col), matmul and reductions.
// Window ops need static channels and spatial extents; the batch extent may be dyn.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include "../core/random.hpp"
#include "expr.hpp"

namespace kiln {

namespace ex {

// (dtype and shape by the catalogue's rule, as expr.hpp's node types)
template <window2d W, bool NegInfPad, class A>
struct unfold : node_base<A> {
  static constexpr node proto() {
    node n = detail::make_node(op::unfold, dtype::f32, dims{});
    set_window(n, W);
    n.value = NegInfPad ? -std::numeric_limits<double>::infinity() : 0.0;
    return n;
  }
  static constexpr detail::typed t = detail::by_rule<A>(proto(), A::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

template <window2d W, index_t H, index_t Wd, class A>
struct fold : node_base<A> {
  static constexpr node proto() {
    node n = detail::make_node(op::fold, dtype::f32, dims{});
    set_window(n, W);
    set_fold_extents(n, H, Wd);
    return n;
  }
  static constexpr detail::typed t = detail::by_rule<A>(proto(), A::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

template <class T, class I>
struct gather : node_base<T, I> {
  static constexpr node proto() { return detail::make_node(op::gather, dtype::f32, dims{}); }
  static constexpr detail::typed t = detail::by_rule<T, I>(proto(), T::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

template <class I, class S, class L>
struct scatter_add : node_base<I, S, L> {
  static constexpr node proto() { return detail::make_node(op::scatter_add, dtype::f32, dims{}); }
  static constexpr detail::typed t = detail::by_rule<I, S, L>(proto(), S::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

template <std::uint32_t Stream, class L, class Seed>
struct rand : node_base<L, Seed> {
  static constexpr node proto() {
    node n = detail::make_node(op::rand, dtype::f32, dims{});
    n.axes = Stream;
    return n;
  }
  static constexpr detail::typed t = detail::by_rule<L, Seed>(proto(), dtype::f32);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

}  // namespace ex

namespace detail {
/// The constant v in dtype D as an ex::literal (lit<D, bits(v)>; k<D, Num, Den> for Num / Den).
/// kiln's own formulas write their constants so: a subexpression of placeholders and literals is
/// pure and traced once however often the formula uses it, where a C++ scalar, a run-time leaf,
/// makes every use a copy of it (sinh was 286 nodes, bilinear interpolation 508).
constexpr std::uint64_t bits(double v) { return std::bit_cast<std::uint64_t>(v); }
template <dtype D, std::uint64_t Bits>
inline constexpr ex::literal<D, Bits> lit{};
template <dtype D, std::int64_t Num, std::int64_t Den = 1>
inline constexpr ex::literal<D, bits(static_cast<double>(Num) / static_cast<double>(Den))> k{};

/// layer_norm(x, gamma, beta, eps) with eps a literal (the bits of a double), not a run-time
/// scalar: the expression stays pure, so tracing shares it wherever it is used (nn::layer_norm).
template <std::uint64_t EpsBits, tensor_operand X, tensor_operand G, tensor_operand B>
constexpr auto layer_norm_literal_eps(const X& x, const G& gamma, const B& beta) {
  using EX = decltype(as_expr(x));
  using EG = decltype(as_expr(gamma));
  using EB = decltype(as_expr(beta));
  constexpr dtype d = float_result(promote(promote(EX::dt, EG::dt), EB::dt));
  if constexpr (!layer_norm_shape(EX::shape, EG::shape, EB::shape).ok) {
    return kiln::layer_norm(x, gamma, beta);  // (its error)
  } else {
    auto cx = to_dtype<d>(as_expr(x));
    auto cg = to_dtype<d>(as_expr(gamma));
    auto cb = to_dtype<d>(as_expr(beta));
    auto ce = ex::literal<d, EpsBits>{};
    return ex::build<ex::composite<op::layer_norm, 0, decltype(cx), decltype(cg), decltype(cb), decltype(ce)>>(cx, cg, cb, ce);
  }
}
}  // namespace detail

namespace ex {

/// conv2d(x, weight, bias), max_pool2d(x), avg_pool2d(x) with their window.
template <op O, window2d W, class... K>
struct windowed : node_base<K...> {
  static constexpr node proto() {
    node n = detail::make_node(O, dtype::f32, dims{});
    set_window(n, W);
    return n;
  }
  static constexpr detail::typed t = detail::by_rule<K...>(proto(), std::tuple_element_t<0, std::tuple<K...>>::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

}  // namespace ex

/// The seed input that kiln's random ops conventionally read (optim::trainer feeds it at every
/// step: a new dropout mask each step, the same masks when a run is repeated or resumed).
using seed_input = input<"kiln.seed", dtype::i64, shape<>>;

namespace detail {
template <index_t K, index_t S, index_t P, index_t D>
constexpr window2d square_window() {
  return {K, K, S, S, P, P, D, D};
}

/// Args: the window as the error names it (a square window's four numbers, or its options).
template <op O, window2d W, bool NegInf, class Args = window_args<W.kh, W.sh, W.ph, W.dh>, tensor_operand X>
constexpr auto unfold_node(const X& x) {
  using E = decltype(as_expr(x));
  constexpr bool ok = detail::rule_ok<ex::unfold<W, NegInf, E>>;
  (void)error::window_does_not_fit<O, as_shape<E::shape>, Args, ok>::value;
  if constexpr (!ok) return ex::invalid<E::dt>{};
  else return ex::build<ex::unfold<W, NegInf, E>>(as_expr(x));
}

template <op O, window2d W, tensor_operand X>
constexpr auto pool_node(const X& x) {
  using E = decltype(as_expr(x));
  constexpr dtype d = float_result(E::dt);
  constexpr bool ok = pool2d_shape(E::shape, W).ok;
  (void)error::window_does_not_fit<O, as_shape<E::shape>, window_args<W.kh, W.sh, W.ph, W.dh>, ok>::value;
  if constexpr (!ok) {
    return ex::invalid<d>{};
  } else {
    auto c = to_dtype<d>(as_expr(x));
    return ex::build<ex::windowed<O, W, decltype(c)>>(c);
  }
}
}  // namespace detail

namespace detail {
template <window2d Win, index_t H, index_t W, class Args, tensor_operand X>
constexpr auto fold_node(const X& cols) {
  using E = decltype(as_expr(cols));
  constexpr bool ok = detail::rule_ok<ex::fold<Win, H, W, E>>;
  (void)error::fold_shapes_do_not_match<as_shape<E::shape>, Args, shape<H, W>, ok>::value;
  if constexpr (!ok) return ex::invalid<E::dt>{};
  else return ex::build<ex::fold<Win, H, W, E>>(as_expr(cols));
}
}  // namespace detail

// ---- windows ----------------------------------------------------------------------------------

/// unfold<Kernel, Stride, Padding, Dilation>(x): im2col, as torch.nn.functional.unfold:
/// [n, c, h, w] -> [n, c * k * k, ho * wo], zero padding.
template <index_t Kernel, index_t Stride = 1, index_t Padding = 0, index_t Dilation = 1, tensor_operand X>
constexpr auto unfold(const X& x) {
  return detail::unfold_node<op::unfold, detail::square_window<Kernel, Stride, Padding, Dilation>(), false>(x);
}

/// fold<H, W, Kernel, Stride, Padding, Dilation>(cols): col2im, as torch.nn.functional.fold:
/// [n, c * k * k, ho * wo] -> [n, c, H, W], overlapping windows summed.
template <index_t H, index_t W, index_t Kernel, index_t Stride = 1, index_t Padding = 0, index_t Dilation = 1,
          tensor_operand X>
constexpr auto fold(const X& cols) {
  return detail::fold_node<detail::square_window<Kernel, Stride, Padding, Dilation>(), H, W,
                           window_args<Kernel, Stride, Padding, Dilation>>(cols);
}

namespace detail {
template <index_t Stride, index_t Padding, index_t Dilation, bool HasBias, class X, class Wt, class B>
constexpr auto conv2d_node(const X& x, const Wt& w, const B& b) {
  using EX = decltype(as_expr(x));
  using EW = decltype(as_expr(w));
  using EB = decltype(as_expr(b));
  constexpr dims xs = EX::shape, ws = EW::shape, bs = EB::shape;
  constexpr dtype d = float_result(promote(promote(EX::dt, EW::dt), EB::dt));
  constexpr bool poisoned = xs.poisoned() || ws.poisoned() || bs.poisoned();
  // operands that fit together: weight [out, c, kh, kw] (static), x [n, c, h, w], bias [out] or none
  constexpr bool match_ok =
      poisoned || (ws.rank == 4 && ws.e[0] > 0 && ws.e[1] > 0 && ws.e[2] > 0 && ws.e[3] > 0 && xs.rank == 4 &&
                   xs.e[1] == ws.e[1] && (HasBias ? bs.rank == 1 && extents_compatible(bs.e[0], ws.e[0]) : bs.rank == 0));
  constexpr window2d win{match_ok && !poisoned ? ws.e[2] : 1, match_ok && !poisoned ? ws.e[3] : 1, Stride, Stride,
                         Padding, Padding, Dilation, Dilation};
  constexpr bool fit_ok = !match_ok || poisoned || unfold_shape(xs, win).ok;
  (void)error::conv2d_shapes_do_not_match<as_shape<xs>, as_shape<ws>, as_shape<bs>, match_ok>::value;
  (void)error::window_does_not_fit<op::conv2d, as_shape<xs>, window_args<win.kh, Stride, Padding, Dilation>, fit_ok>::value;
  if constexpr (!(match_ok && fit_ok)) {
    return ex::invalid<d>{};
  } else {
    auto cx = to_dtype<d>(as_expr(x));
    auto cw = to_dtype<d>(as_expr(w));
    auto cb = to_dtype<d>(as_expr(b));
    return ex::build<ex::windowed<op::conv2d, win, decltype(cx), decltype(cw), decltype(cb)>>(cx, cw, cb);
  }
}
}  // namespace detail

namespace detail {
/// conv2d with Groups > 1 (torch.nn.functional.conv2d's `groups`): x [n, c, h, w], weight
/// [out, c / Groups, kh, kw]. The columns of unfold hold each group's channels together (rows
/// ordered channel, ky, kx), so the convolution is one matmul batched over the groups:
/// [Groups, out / Groups, k] x [n, Groups, k, ho wo].
template <index_t Stride, index_t Padding, index_t Dilation, index_t Groups, bool HasBias, class X, class Wt, class B>
constexpr auto grouped_conv2d(const X& x, const Wt& w, const B& b) {
  using EX = decltype(as_expr(x));
  using EW = decltype(as_expr(w));
  using EB = decltype(as_expr(b));
  constexpr dims xs = EX::shape, ws = EW::shape, bs = EB::shape;
  constexpr dtype d = float_result(promote(promote(EX::dt, EW::dt), EB::dt));
  static_assert(Groups > 0, "kiln::conv2d: the number of groups must be positive");
  constexpr bool match_ok = ws.rank == 4 && ws.e[0] > 0 && ws.e[1] > 0 && ws.e[2] > 0 && ws.e[3] > 0 &&
                            xs.rank == 4 && xs.e[1] > 0 && ws.e[0] % Groups == 0 && ws.e[1] * Groups == xs.e[1] &&
                            (HasBias ? bs.rank == 1 && extents_compatible(bs.e[0], ws.e[0]) : bs.rank == 0);
  static_assert(match_ok, "kiln::conv2d: with groups, x [n, c, h, w], weight [out, c / groups, kh, kw] and bias "
                          "[out], out and c divisible by the groups (the shapes are in the instantiation below)");
  constexpr window2d win{match_ok ? ws.e[2] : 1, match_ok ? ws.e[3] : 1, Stride, Stride, Padding, Padding,
                         Dilation, Dilation};
  constexpr bool fit_ok = !match_ok || unfold_shape(xs, win).ok;
  (void)error::window_does_not_fit<op::conv2d, as_shape<xs>, window_args<win.kh, Stride, Padding, Dilation>, fit_ok>::value;
  if constexpr (!(match_ok && fit_ok)) {
    return ex::invalid<d>{};
  } else {
    constexpr index_t per_group = ws.e[1] * ws.e[2] * ws.e[3], out_per_group = ws.e[0] / Groups;
    constexpr index_t ho = window_positions(xs.e[2], win.kh, win.sh, win.ph, win.dh);
    constexpr index_t wo = window_positions(xs.e[3], win.kw, win.sw, win.pw, win.dw);
    const auto cols = unfold_node<op::conv2d, win, false>(to_dtype<d>(as_expr(x)));  // [n, c k, ho wo]
    const auto by_group = reshaped<dims{xs.e[0], Groups, per_group, ho * wo}>(cols);
    const auto weights = reshaped<dims{Groups, out_per_group, per_group}>(to_dtype<d>(as_expr(w)));
    const auto y = reshaped<dims{xs.e[0], ws.e[0], ho, wo}>(matmul(weights, by_group));
    if constexpr (HasBias) return y + reshaped<dims{1, ws.e[0], 1, 1}>(to_dtype<d>(as_expr(b)));
    else return y;
  }
}
}  // namespace detail

/// conv2d<Stride, Padding, Dilation, Groups>(x, weight, bias), as torch.nn.functional.conv2d:
/// x [n, c, h, w], weight [out, c / Groups, kh, kw], bias [out] -> [n, out, ho, wo]. One group
/// is a node of its own (a kernel of the backend); more are unfold and a batched matmul.
template <index_t Stride = 1, index_t Padding = 0, index_t Dilation = 1, index_t Groups = 1, tensor_operand X,
          tensor_operand Wt, tensor_operand B>
constexpr auto conv2d(const X& x, const Wt& weight, const B& bias) {
  if constexpr (Groups == 1) return detail::conv2d_node<Stride, Padding, Dilation, true>(x, weight, bias);
  else return detail::grouped_conv2d<Stride, Padding, Dilation, Groups, true>(x, weight, bias);
}
/// conv2d without a bias (its graph node carries a rank-0 operand in the bias's place, which
/// means none).
template <index_t Stride = 1, index_t Padding = 0, index_t Dilation = 1, index_t Groups = 1, tensor_operand X,
          tensor_operand Wt>
constexpr auto conv2d(const X& x, const Wt& weight) {
  using EW = decltype(as_expr(weight));
  const auto none = ex::literal<float_result(EW::dt), 0>{};
  if constexpr (Groups == 1) return detail::conv2d_node<Stride, Padding, Dilation, false>(x, weight, none);
  else return detail::grouped_conv2d<Stride, Padding, Dilation, Groups, false>(x, weight, none);
}

/// max_pool2d<Kernel, Stride = Kernel, Padding = 0>(x): the maximum of each window, padding
/// counting as -inf (torch.nn.functional.max_pool2d). Its gradient is shared evenly among tied
/// maxima (PyTorch gives it to one of them).
template <index_t Kernel, index_t Stride = Kernel, index_t Padding = 0, tensor_operand X>
constexpr auto max_pool2d(const X& x) {
  return detail::pool_node<op::max_pool2d, detail::square_window<Kernel, Stride, Padding, 1>()>(x);
}
/// avg_pool2d<Kernel, Stride = Kernel, Padding = 0>(x): the mean of each window, padding counted
/// as zeros (torch's count_include_pad=True).
template <index_t Kernel, index_t Stride = Kernel, index_t Padding = 0, tensor_operand X>
constexpr auto avg_pool2d(const X& x) {
  return detail::pool_node<op::avg_pool2d, detail::square_window<Kernel, Stride, Padding, 1>()>(x);
}

// ---- indexing --------------------------------------------------------------------------------

/// gather(table, index): table[index] along axis 0, shaped [...index, ...table's other axes].
/// An index outside [0, rows) throws std::out_of_range when the graph runs.
template <tensor_operand T, tensor_operand I>
constexpr auto gather(const T& table, const I& index) {
  using ET = decltype(as_expr(table));
  using EI = decltype(as_expr(index));
  constexpr bool int_ok = is_integral(EI::dt) && EI::dt != dtype::boolean;
  constexpr bool shape_ok = gather_shape(ET::shape, EI::shape).ok;
  (void)error::indices_must_be_integers<op::gather, EI::dt, int_ok>::value;
  (void)error::gather_shapes_do_not_match<op::gather, as_shape<ET::shape>, as_shape<EI::shape>, shape_ok>::value;
  if constexpr (!(int_ok && shape_ok)) return ex::invalid<ET::dt>{};
  else return ex::build<ex::gather<ET, EI>>(as_expr(table), as_expr(index));
}

/// embedding(index, table): torch.nn.functional.embedding(input, weight), i.e. gather.
template <tensor_operand I, tensor_operand T>
constexpr auto embedding(const I& index, const T& table) {
  return gather(table, index);
}

/// scatter_add(index, src, like): zeros shaped like `like` (whose values are not read), with
/// each row of src added at the row that index names (gather's adjoint; repeated indices add).
template <tensor_operand I, tensor_operand S, tensor_operand L>
constexpr auto scatter_add(const I& index, const S& src, const L& like) {
  using EI = decltype(as_expr(index));
  using ES = decltype(as_expr(src));
  using EL = decltype(as_expr(like));
  constexpr bool int_ok = is_integral(EI::dt) && EI::dt != dtype::boolean;
  constexpr bool shape_ok = scatter_add_shape(EI::shape, ES::shape, EL::shape).ok;
  (void)error::indices_must_be_integers<op::scatter_add, EI::dt, int_ok>::value;
  (void)error::gather_shapes_do_not_match<op::scatter_add, as_shape<EL::shape>, as_shape<ES::shape>, shape_ok>::value;
  if constexpr (!(int_ok && shape_ok)) {
    return ex::invalid<ES::dt>{};
  } else {
    auto cl = to_dtype<ES::dt>(as_expr(like));
    return ex::build<ex::scatter_add<EI, ES, decltype(cl)>>(as_expr(index), as_expr(src), cl);
  }
}

// ---- random numbers --------------------------------------------------------------------------

/// rand_like<Stream>(x, seed): f32 values uniform in [0, 1) shaped like x (x's values are not
/// read). Element i (row-major) is philox(seed, stream).uniform24(i) with stream the FNV hash of
/// the name Stream: the same on every backend and thread count. Give each random op of a graph
/// its own stream name; two with the same name and operands are the same values.
template <fixed_string Stream = "rand", tensor_operand X, tensor_operand S>
constexpr auto rand_like(const X& x, const S& seed) {
  using EX = decltype(as_expr(x));
  using ES = decltype(as_expr(seed));
  constexpr bool ok = ES::dt == dtype::i64 && ES::shape.rank == 0;
  (void)error::seed_must_be_a_rank0_i64<as_shape<ES::shape>, ES::dt, ok>::value;
  if constexpr (!ok) return ex::invalid<dtype::f32>{};
  else
    return ex::build<ex::rand<static_cast<std::uint32_t>(stream_of(Stream.view())), EX, ES>>(as_expr(x), as_expr(seed));
}

/// dropout<Stream, Num, Den = 100>(x, seed): zeroes each element with probability p = Num / Den
/// (0 <= p < 1) and scales the others by 1 / (1 - p), as torch.nn.functional.dropout in training
/// mode. The mask is rand_like<Stream>(x, seed) >= p, so the backward pass uses the same mask.
/// p is a compile-time ratio: dropout<"fc1.drop", 20>(h, seed) drops 20%; p and 1 / (1 - p) are
/// constants in the graph (literals), which canonicalisation can fold.
template <fixed_string Stream, index_t Num, index_t Den = 100, tensor_operand X, tensor_operand S>
constexpr auto dropout(const X& x, const S& seed) {
  static_assert(Den > 0 && Num >= 0 && Num < Den, "kiln: dropout needs 0 <= Num / Den < 1");
  using EX = decltype(as_expr(x));
  constexpr dtype d = float_result(EX::dt);
  constexpr double p = static_cast<double>(Num) / static_cast<double>(Den);
  constexpr double scale = 1.0 / (1.0 - p);
  const auto cx = to_dtype<d>(as_expr(x));
  using P = ex::literal<dtype::f32, std::bit_cast<std::uint64_t>(static_cast<double>(static_cast<float>(p)))>;
  using K = ex::literal<d, std::bit_cast<std::uint64_t>(scale)>;
  using Z = ex::literal<d, std::bit_cast<std::uint64_t>(0.0)>;
  return where(rand_like<Stream>(cx, seed) >= P{}, cx * K{}, Z{});
}

// ---- attention -------------------------------------------------------------------------------

/// scaled_dot_product_attention's causal flag: `scaled_dot_product_attention<causal>(q, k, v)`.
inline constexpr bool causal = true;

namespace detail {
/// sqrt(x) for x >= 1 in constant evaluation (std::sqrt is not constexpr in C++20): Newton's
/// iteration from above decreases until it reaches the root (within an ulp).
constexpr double sqrt_constexpr(double x) {
  double r = x;
  for (;;) {
    const double next = 0.5 * (r + x / r);
    if (!(next < r)) return r;
    r = next;
  }
}

constexpr bool at_most_one_dyn(const dims& s) {
  int n = 0;
  for (int i = 0; i < s.rank; ++i) n += s.e[i] == dyn;
  return n <= 1;
}

/// The rank-0 `true` that stands for "no mask".
using no_mask = ex::literal<dtype::boolean, std::bit_cast<std::uint64_t>(1.0)>;

template <bool Causal, bool HasScale, class Q, class K, class V, class M>
constexpr auto sdpa_node(const Q& q, const K& k, const V& v, const M& mask, double scale) {
  using EQ = decltype(as_expr(q));
  using EK = decltype(as_expr(k));
  using EV = decltype(as_expr(v));
  using EM = decltype(as_expr(mask));
  constexpr dtype d = float_result(promote(promote(EQ::dt, EK::dt), EV::dt));
  constexpr dtype md = EM::dt == dtype::boolean ? dtype::boolean : d;
  constexpr dims qs = EQ::shape, ks = EK::shape, vs = EV::shape, ms = EM::shape;
  constexpr bool poisoned = qs.poisoned() || ks.poisoned() || vs.poisoned() || ms.poisoned();
  constexpr bool shape_ok = sdpa_shape(qs, ks, vs, ms).ok;
  constexpr int r = qs.rank;
  constexpr bool scale_ok = poisoned || !shape_ok || HasScale || qs.e[r - 1] != dyn;
  constexpr bool grouped = !poisoned && shape_ok && r >= 3 && qs.e[r - 3] != ks.e[r - 3];
  constexpr bool dyn_ok = !grouped || (at_most_one_dyn(qs) && at_most_one_dyn(ks) && at_most_one_dyn(vs));
  constexpr bool mask_ok = EM::dt == dtype::boolean || is_floating(EM::dt);
  (void)error::dtype_not_supported<Causal ? op::sdpa_causal : op::sdpa, EM::dt, mask_ok>::value;
  (void)error::attention_shapes_do_not_match<as_shape<qs>, as_shape<ks>, as_shape<vs>, as_shape<ms>, shape_ok>::value;
  (void)error::grouped_attention_needs_at_most_one_dyn_extent<as_shape<qs>, as_shape<ks>, dyn_ok>::value;
  (void)error::attention_default_scale_needs_a_static_head_size<as_shape<qs>, scale_ok>::value;
  if constexpr (!(shape_ok && dyn_ok && scale_ok && mask_ok)) {
    return ex::invalid<d>{};
  } else {
    // the default scale is known here: a literal, so that the expression stays pure (traced
    // once wherever it is used, as in a stack of layers); a given one is a run-time scalar
    const auto scaled = [&] {
      if constexpr (HasScale) {
        return to_dtype<d>(as_expr(q)) * make_scalar<d>(scale);
      } else {
        constexpr double sc = 1.0 / sqrt_constexpr(static_cast<double>(qs.e[r - 1]));
        return to_dtype<d>(as_expr(q)) * ex::literal<d, std::bit_cast<std::uint64_t>(sc)>{};
      }
    };
    auto cq = scaled();
    auto ck = to_dtype<d>(as_expr(k));
    auto cv = to_dtype<d>(as_expr(v));
    auto cm = to_dtype<md>(as_expr(mask));
    constexpr op o = Causal ? op::sdpa_causal : op::sdpa;
    return ex::build<ex::composite<o, 0, decltype(cq), decltype(ck), decltype(cv), decltype(cm)>>(cq, ck, cv, cm);
  }
}
}  // namespace detail

/// torch.nn.functional.scaled_dot_product_attention: softmax(q k^T * scale [+ mask]) v for
/// q [..., h, tq, d], k [..., hk, tk, d], v [..., hk, tk, dv] -> [..., h, tq, dv]. The scale is
/// 1 / sqrt(d) unless given; the mask is bool (false: the key is not attended to) or added to
/// the scores, and broadcasts to [..., h, tq, tk]; `<causal>` also masks the keys after each
/// query (key j for query i where j > i, PyTorch's is_causal); fewer k/v heads than q heads,
/// dividing them, is grouped-query attention (PyTorch's enable_gqa). A row whose keys are all
/// masked is NaN, as in PyTorch's math reference. No dropout. Captured as one op; the
/// decomposition pass turns it into two matmuls and a softmax.
template <bool Causal = false, tensor_operand Q, tensor_operand K, tensor_operand V>
constexpr auto scaled_dot_product_attention(const Q& q, const K& k, const V& v) {
  return detail::sdpa_node<Causal, false>(q, k, v, detail::no_mask{}, 0.0);
}
template <bool Causal = false, tensor_operand Q, tensor_operand K, tensor_operand V, scalar_operand S>
constexpr auto scaled_dot_product_attention(const Q& q, const K& k, const V& v, S scale) {
  return detail::sdpa_node<Causal, true>(q, k, v, detail::no_mask{}, static_cast<double>(scale));
}
template <bool Causal = false, tensor_operand Q, tensor_operand K, tensor_operand V, tensor_operand M>
constexpr auto scaled_dot_product_attention(const Q& q, const K& k, const V& v, const M& mask) {
  return detail::sdpa_node<Causal, false>(q, k, v, mask, 0.0);
}
template <bool Causal = false, tensor_operand Q, tensor_operand K, tensor_operand V, tensor_operand M,
          scalar_operand S>
constexpr auto scaled_dot_product_attention(const Q& q, const K& k, const V& v, const M& mask, S scale) {
  return detail::sdpa_node<Causal, true>(q, k, v, mask, static_cast<double>(scale));
}

}  // namespace kiln
