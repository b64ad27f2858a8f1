// kiln/graph/graph.hpp: the graph value that every pass reads and writes, its freezing into a
// fixed-size constant, and the validity check that runs between passes.
//
// A graph is a topologically ordered list of nodes: a node's inputs always come before it.
// Leaves (input, param, bound, scalar) carry a slot: the position of their run-time value in
// the leaf table a backend receives. A pass is an ordinary constexpr function graph -> graph;
// it runs inside constant evaluation while the user's program compiles, and also at run time
// in tests, where a debugger can step through it.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "../core/cvec.hpp"
#include "../core/dtype.hpp"
#include "../core/shape.hpp"
#include "../core/shape_rules.hpp"
#include "ops.hpp"

namespace kiln {

/// Longest leaf name, in characters.
inline constexpr std::size_t max_name = 127;  // (optimizer states add suffixes to module paths)

/// A permutation of up to max_rank axes packed in 32 bits (4 bits an axis): cheap to copy in
/// constant evaluation, where every copied array element costs a step.
struct axis_perm {
  std::uint32_t bits = 0;
  constexpr int operator[](int i) const { return static_cast<int>((bits >> (4 * i)) & 0xfu); }
  constexpr void set(int i, int axis) {
    bits = (bits & ~(0xfu << (4 * i))) | (static_cast<std::uint32_t>(axis & 0xf) << (4 * i));
  }
  friend constexpr bool operator==(axis_perm a, axis_perm b) { return a.bits == b.bits; }
};

/// The most inputs a node takes (attention_grad's six; every other op four at most).
inline constexpr int max_inputs = 6;
// node::in, the per-input arrays of the passes (fuse.hpp, autodiff.hpp) and canonicalize's
// hash_node spell out one term per input: a larger max_inputs must extend them, or its extra
// inputs read as 0 (hash_node's would only hash worse)
static_assert(max_inputs == 6, "extend the per-input initialisers");

struct node {
  op o = op::input;
  dtype dt = dtype::f32;
  dims shape{};                      ///< static shape: extents or dyn
  /// inputs, by node index; nin() of them are used (a C array: cheap in constant evaluation)
  int in[max_inputs]{-1, -1, -1, -1, -1, -1};

  // attributes, by op
  std::uint32_t axes = 0;      ///< reductions: bit i set = reduce axis i of the input; rand: its stream
  bool keepdim = false;        ///< reductions
  int axis = 0;                ///< slice, concat
  index_t begin = 0, end = 0;  ///< slice: on axis, after wrapping negatives (windows: see window_of)
  index_t step = 1;            ///< slice
  axis_perm perm{};                          ///< permute: result axis i is input axis perm[i]
  double value = 0;                          ///< constant: its value; var: correction; unfold: padding value
  int slot = -1;                             ///< leaves: index into the leaf table
  const char* name = nullptr;                ///< input, param: the placeholder's name (static storage)
  std::uint8_t name_len = 0;
  std::uint8_t phase = 0;  ///< 0 forward; 1 emitted by differentiation (backward, tangents); 2 recomputed

  /// Number of inputs (the catalogue's arity).
  constexpr int nin() const { return detail::op_table[static_cast<int>(o)].arity; }
  constexpr std::string_view label() const { return name_len ? std::string_view{name, name_len} : std::string_view{}; }
  /// Names the node; s must live in static storage (a literal, or a template parameter object).
  constexpr void set_name(std::string_view s) {
    name = s.data();
    name_len = static_cast<std::uint8_t>(s.size() < max_name ? s.size() : max_name);
  }
};

/// A node's attributes as words: the one list of them. Equality of nodes (canonicalize's CSE,
/// trace's sharing), their hashes (record.hpp's structural hash, CSE's table) and the
/// registered key of a built expression (record.hpp's node_key) all read the attributes through
/// it, so an attribute added to node is added here once and nowhere else.
inline constexpr int attribute_words = 7;
struct attributes {
  std::uint64_t w[attribute_words]{};
  friend constexpr bool operator==(const attributes&, const attributes&) = default;
};
constexpr attributes attributes_of(const node& n) {
  return {{std::uint64_t{n.axes} | std::uint64_t{n.keepdim} << 32, static_cast<std::uint32_t>(n.axis),
           static_cast<std::uint64_t>(n.begin), static_cast<std::uint64_t>(n.end), static_cast<std::uint64_t>(n.step),
           n.perm.bits, std::bit_cast<std::uint64_t>(n.value)}};
}
/// attributes_of's inverse.
constexpr void set_attributes(node& n, const attributes& a) {
  n.axes = static_cast<std::uint32_t>(a.w[0]);
  n.keepdim = (a.w[0] >> 32) != 0;
  n.axis = static_cast<int>(static_cast<std::uint32_t>(a.w[1]));
  n.begin = static_cast<index_t>(a.w[2]);
  n.end = static_cast<index_t>(a.w[3]);
  n.step = static_cast<index_t>(a.w[4]);
  n.perm.bits = static_cast<std::uint32_t>(a.w[5]);
  n.value = std::bit_cast<double>(a.w[6]);
}
/// Whether two nodes have the same attributes.
constexpr bool same_attributes(const node& a, const node& b) { return attributes_of(a) == attributes_of(b); }

/// The constant node under any reshapes and broadcasts of node i of `nodes` (a constant is rank
/// 0: one value everywhere, e.g. a gradient's seed 1 reshaped to [1, 1, 1, 1]), or -1.
template <class Nodes>
constexpr int constant_under_shapes(const Nodes& nodes, int i) {
  const auto at = [&](int x) -> const node& { return nodes[static_cast<std::size_t>(x)]; };
  while (at(i).o == op::reshape || at(i).o == op::broadcast) i = at(i).in[0];
  return at(i).o == op::constant ? i : -1;
}

/// Fused attention's attributes (attention, attention_grad): whether it is causal (node.axis),
/// and the factor of its scores, s = scale q k^T [+ mask] (node.value; decompose folds a
/// positive constant factor of q into it, which the kernels apply to the score tiles).
constexpr bool attention_causal(const node& n) { return n.axis != 0; }
constexpr double attention_scale(const node& n) { return n.value; }

/// The window of an unfold, fold, conv2d or pooling node, packed 16 bits a field into begin
/// (kernel and stride) and step (padding and dilation); fold keeps its output's spatial
/// extents in end (h | w << 32).
constexpr window2d window_of(const node& n) {
  const auto f = [](index_t v, int i) { return static_cast<index_t>((static_cast<std::uint64_t>(v) >> (16 * i)) & 0xffffu); };
  return {f(n.begin, 0), f(n.begin, 1), f(n.begin, 2), f(n.begin, 3), f(n.step, 0), f(n.step, 1), f(n.step, 2), f(n.step, 3)};
}
constexpr void set_window(node& n, const window2d& w) {
  const auto p = [](index_t a, index_t b, index_t c, index_t d) {
    return static_cast<index_t>(static_cast<std::uint64_t>(a) | static_cast<std::uint64_t>(b) << 16 |
                                static_cast<std::uint64_t>(c) << 32 | static_cast<std::uint64_t>(d) << 48);
  };
  n.begin = p(w.kh, w.kw, w.sh, w.sw);
  n.step = p(w.ph, w.pw, w.dh, w.dw);
}
/// fold's output height and width.
constexpr index_t fold_height(const node& n) { return n.end & 0xffffffff; }
constexpr index_t fold_width(const node& n) { return n.end >> 32; }
constexpr void set_fold_extents(node& n, index_t h, index_t w) { n.end = h | (w << 32); }

/// The graph value. Its arrays (cvec) work inside constant evaluation as long as nothing
/// allocated escapes it; freeze() turns a result into a fixed-size constant that may.
struct graph {
  cvec<node> nodes;
  cvec<int> outputs;
  int leaves = 0;  ///< size of the leaf table

  constexpr int add(const node& n) {
    nodes.push_back(n);
    return static_cast<int>(nodes.size()) - 1;
  }

  /// Appends another graph's nodes (renumbering inputs and leaf slots after ours) and returns
  /// the new index of its first output.
  template <class G>
  constexpr int append(const G& sub) {
    const int base = static_cast<int>(nodes.size());
    for (const node& s : sub.nodes) {
      node n = s;
      for (int j = 0; j < n.nin(); ++j) n.in[j] += base;
      if (n.slot >= 0) n.slot += leaves;
      nodes.push_back(n);
    }
    leaves += sub.leaves;
    return sub.outputs[0] + base;
  }
};

/// A graph frozen into arrays: a literal type that can be a static constexpr member.
template <std::size_t N, std::size_t M>
struct frozen_graph {
  std::array<node, N> nodes{};
  std::array<int, M> outputs{};
  int leaves = 0;

  constexpr graph thaw() const {
    graph g;
    g.nodes.assign(nodes.begin(), nodes.end());
    g.outputs.assign(outputs.begin(), outputs.end());
    g.leaves = leaves;
    return g;
  }
};

/// A frozen graph's arrays as spans, so that run-time code taking any graph (logs, backends)
/// need not be a template on the frozen sizes.
struct graph_span {
  std::span<const node> nodes;
  std::span<const int> outputs;
  int leaves = 0;

  template <std::size_t N, std::size_t M>
  static constexpr graph_span of(const frozen_graph<N, M>& g) {
    return {std::span<const node>(g.nodes.data(), N), std::span<const int>(g.outputs.data(), M), g.leaves};
  }
  /// A run-time graph's arrays (valid while it lives and does not grow).
  static graph_span of(const graph& g) {
    return {{g.nodes.data(), g.nodes.size()}, {g.outputs.data(), g.outputs.size()}, g.leaves};
  }
  graph thaw() const {
    graph g;
    g.nodes.assign(nodes.data(), nodes.data() + nodes.size());
    g.outputs.assign(outputs.data(), outputs.data() + outputs.size());
    g.leaves = leaves;
    return g;
  }
};

/// Freezes the graph returned by a captureless constexpr lambda. The lambda runs twice: once
/// to size the arrays, once to fill them (allocations cannot outlive a constant evaluation).
namespace detail {
/// The sizes of the graph a Make lambda returns: its own constant (evaluation budget).
template <class Make>
constexpr std::array<std::size_t, 2> sizes_of() {
  const graph g = Make{}();
  return std::array<std::size_t, 2>{g.nodes.size(), g.outputs.size()};
}
template <class Make>
inline constexpr std::array<std::size_t, 2> graph_size = sizes_of<Make>();
}  // namespace detail

namespace detail {
/// Copies graph g (n nodes, m outputs) into frozen arrays f.
template <class F>
constexpr void copy_graph(F& f, const node* from, const int* outputs, std::size_t n, std::size_t m, int leaves) {
  node* to = f.nodes.data();  // raw pointers: no call per element in constant evaluation
  for (std::size_t i = 0; i < n; ++i) to[i] = from[i];
  for (std::size_t i = 0; i < m; ++i) f.outputs[i] = outputs[i];
  f.leaves = leaves;
}
template <std::size_t N, std::size_t M, class Make>
constexpr frozen_graph<N, M> freeze_sized(Make) {
  const graph g = Make{}();
  frozen_graph<N, M> f;
  copy_graph(f, g.nodes.data(), g.outputs.data(), N, M, g.leaves);
  return f;
}

/// A graph of at most N nodes and M outputs in arrays of those capacities, with its sizes
/// (when larger, only the sizes).
template <std::size_t N, std::size_t M>
struct bounded_graph {
  std::array<node, N> nodes{};
  std::array<int, M> outputs{};
  std::size_t n = 0, m = 0;
  int leaves = 0;
  constexpr bool fits() const { return n <= N && m <= M; }
};
/// The graph a Make lambda returns, within capacities N and M: its own constant, one run.
template <class Make, std::size_t N, std::size_t M>
constexpr bounded_graph<N, M> make_bounded() {
  const graph g = Make{}();
  bounded_graph<N, M> b;
  b.n = g.nodes.size();
  b.m = g.outputs.size();
  if (b.fits()) copy_graph(b, g.nodes.data(), g.outputs.data(), b.n, b.m, g.leaves);
  return b;
}
template <class Make, std::size_t N, std::size_t M>
inline constexpr bounded_graph<N, M> bounded_result = make_bounded<Make, N, M>();
}  // namespace detail

template <class Make>
constexpr auto freeze(Make) {
  return detail::freeze_sized<detail::graph_size<Make>[0], detail::graph_size<Make>[1]>(Make{});
}

/// freeze, for a lambda whose graph is expected to have at most N nodes and M outputs (a pass
/// on a graph of known size): the lambda runs once where freeze runs it twice, and its result
/// is copied from a constant of those capacities. (A larger result costs one run more: the
/// sizes from the first, the graph from the second.)
template <std::size_t N, std::size_t M, class Make>
constexpr auto freeze_within(Make) {
  constexpr const auto& b = detail::bounded_result<Make, N, M>;
  if constexpr (!b.fits()) {
    return detail::freeze_sized<b.n, b.m>(Make{});
  } else {
    frozen_graph<b.n, b.m> f;
    detail::copy_graph(f, b.nodes.data(), b.outputs.data(), b.n, b.m, b.leaves);
    return f;
  }
}

/// What a node computes: its dtype and shape, or why its inputs and attributes give none.
struct inferred {
  dtype dt = dtype::f32;
  dims shape{};
  /// Why there is none, as the end of a sentence that names the op and the shapes cited:
  /// "kiln: matmul: shapes [2, 3] and [4, 5] do not match as [..., m, k] x [..., k, n]".
  const char* error = nullptr;
  /// The shapes an error names: input j's (0 to max_inputs - 1), the node's own (cite_own), or
  /// none (cite_none).
  std::int8_t cite[2] = {0, -1};
};
inline constexpr std::int8_t cite_none = -1, cite_own = -2;

/// An operand as infer reads it where it is not a graph's node (a run-time value, a capture
/// node type's operand, a named extent): dtype and shape (a reference: infer reads it many times),
/// and the op only the cotangent marker's rule reads.
struct operand {
  op o;
  dtype dt;
  const dims& shape;
};

/// infer's answer for an op it has no rule for (a missing case: the catalogue's check below).
inline constexpr const char* no_shape_rule = "belong to an op without a shape rule (graph.hpp's infer)";

/// The shape and dtype rule of every op, from its inputs (`in(j)`: input j's node, or anything
/// with its dtype `dt` and shape `shape`) and its attributes: the one rule. The passes' builder
/// emits by it, check_graph checks against it, and both backends resolve run-time shapes by it
/// (resolve_shape below), on static, dyn or run-time extents alike. (Leaves, constants and the
/// cotangent marker are what they say they are.)
template <class In>
constexpr inferred infer(const node& x, In in) {
  const auto fail = [](const char* why, std::int8_t a = 0, std::int8_t b = cite_none) {
    return inferred{dtype::f32, dims{}, why, {a, b}};
  };
  const auto from = [&](dtype dt, const shape_result& r, const char* why, std::int8_t a = 0, std::int8_t b = cite_none) {
    return r.ok ? inferred{dt, r.shape, nullptr} : fail(why, a, b);
  };
  const auto has_axis = [&](int j, int axis) { return axis >= 0 && axis < in(j).shape.rank; };
  switch (kind_of(x.o)) {
    case op_kind::leaf:
    case op_kind::constant: return {x.dt, x.shape, nullptr};
    case op_kind::unary: return {in(0).dt, in(0).shape, nullptr};
    case op_kind::binary: {
      if (in(0).dt != in(1).dt) return fail("differ in dtype (inputs of a binary node)", 0, 1);
      const broadcast_result b = broadcast(in(0).shape, in(1).shape);
      return from(is_comparison(x.o) ? dtype::boolean : in(0).dt, {b.shape, b.ok}, "cannot be broadcast together", 0, 1);
    }
    case op_kind::ternary: {
      if (in(0).dt != dtype::boolean) return fail("is not the shape of a bool condition (where's first input)");
      if (in(1).dt != in(2).dt) return fail("differ in dtype (where's branches)", 1, 2);
      const broadcast_result b = broadcast(in(0).shape, in(1).shape);
      if (!b.ok) return fail("cannot be broadcast together", 0, 1);
      const broadcast_result c = broadcast(b.shape, in(2).shape);
      return from(in(1).dt, {c.shape, c.ok}, "cannot be broadcast together", 1, 2);
    }
    case op_kind::reduce: {
      const dims& s = in(0).shape;
      if (s.rank < 32 && (x.axes >> s.rank)) return fail("has no such axis to reduce");
      const shape_result r = reduce_shape(s, x.axes, x.keepdim);
      if (!r.ok) return fail("has no such axis to reduce");
      // max and min of no elements have no value (value 1: the identity, +-inf, is asked for)
      if ((x.o == op::amax || x.o == op::amin) && x.value == 0 && r.shape.is_static() && r.shape.numel() > 0)
        for (int a = 0; a < s.rank; ++a)
          if ((x.axes >> a & 1u) && s.e[a] == 0) return fail("cannot be reduced over an axis of extent 0");
      return {in(0).dt, r.shape, nullptr};
    }
    case op_kind::matmul:
      if (in(0).dt != in(1).dt) return fail("differ in dtype (matmul's operands)", 0, 1);
      return from(in(0).dt, matmul_shape(in(0).shape, in(1).shape), "do not match as [..., m, k] x [..., k, n]", 0, 1);
    case op_kind::shape:
      switch (x.o) {
        case op::reshape:  // the target is the node's own shape (one dyn resolved by the element count)
          return from(in(0).dt, reshape_shape(in(0).shape, x.shape), "do not have the same number of elements (input, target)",
                      0, cite_own);
        case op::permute: {
          std::int8_t p[max_rank]{};
          for (int i = 0; i < in(0).shape.rank && i < max_rank; ++i) p[i] = static_cast<std::int8_t>(x.perm[i]);
          return from(in(0).dt, permute_shape(in(0).shape, p, in(0).shape.rank), "cannot be permuted so (not a permutation)");
        }
        case op::broadcast:  // the target is the node's own shape; its dyn extents are the input's
          return from(in(0).dt, broadcast_to_shape(in(0).shape, x.shape),
                      "cannot be broadcast (source to target; a dyn target extent needs a source extent)", 0, cite_own);
        case op::slice:
          return from(in(0).dt, slice_shape(in(0).shape, x.axis, x.begin, x.end, x.step),
                      "cannot be sliced so (the axis, or the bounds on it, out of range)");
        case op::concat:
          if (in(0).dt != in(1).dt) return fail("differ in dtype (concat's operands)", 0, 1);
          return from(in(0).dt, concat_shape(in(0).shape, in(1).shape, x.axis),
                      "differ outside the concatenation axis (or have no such axis)", 0, 1);
        case op::iota:
          if (!has_axis(0, x.axis)) return fail("has no such axis (iota's)");
          return {x.dt, dims{in(0).shape.e[x.axis]}, nullptr};
        case op::numel: return {x.dt, dims{}, nullptr};
        default: return fail(no_shape_rule);
      }
    case op_kind::cast: return {x.dt, in(0).shape, nullptr};
    case op_kind::movement:
      switch (x.o) {
        case op::gather:
          if (!is_integral(in(1).dt)) return fail("are not integer indices (gather's second input)", 1);
          return from(in(0).dt, gather_shape(in(0).shape, in(1).shape), "do not match as a table [rows, ...] and indices", 0, 1);
        case op::scatter_add:
          if (!is_integral(in(0).dt) || in(1).dt != in(2).dt)
            return fail("are not integer indices, or a source and target of one dtype (scatter_add's)", 0, 1);
          return from(in(1).dt, scatter_add_shape(in(0).shape, in(1).shape, in(2).shape),
                      "do not match as a source [...indices, ...row] and a target", 1, 2);
        case op::unfold: return from(in(0).dt, unfold_shape(in(0).shape, window_of(x)), "does not fit the window (needs [n, c, h, w])");
        case op::cumsum:
        case op::cumprod:
          if (!has_axis(0, x.axis)) return fail("has no such axis (the scan's)");
          if (in(0).dt == dtype::boolean || in(0).dt == dtype::i32) return fail("is of bool or i32 (capture casts a scan's input to i64)");
          return {in(0).dt, in(0).shape, nullptr};
        case op::argsort:
          if (!has_axis(0, x.axis)) return fail("has no such axis (argsort's)");
          return {dtype::i64, in(0).shape, nullptr};
        case op::fold:
          return from(in(0).dt, fold_shape(in(0).shape, window_of(x), fold_height(x), fold_width(x)),
                      "do not match as columns and an output (columns, target)", 0, cite_own);
        case op::attention:
        case op::attention_grad: {
          const dtype t = in(0).dt;
          if ((t != dtype::f32 && t != dtype::f64) || in(1).dt != t || in(2).dt != t)
            return fail("are not of one dtype, f32 or f64 (attention's q and k; v too)", 0, 1);
          if (in(3).dt != dtype::boolean && in(3).dt != t) return fail("is neither bool nor of q's dtype (attention's mask)", 3);
          if (x.o == op::attention)
            return from(t, attention_shape(in(0).shape, in(1).shape, in(2).shape, in(3).shape),
                        "do not match as attention's q [..., h, tq, d] and k [..., hk, tk, d] (static heads, lengths, head sizes)", 0, 1);
          if (in(4).dt != t || in(5).dt != t) return fail("are not of q's dtype (attention_grad's value and cotangent)", 4, 5);
          return from(t, attention_grad_shape(in(0).shape, in(1).shape, in(2).shape, in(3).shape, in(4).shape, in(5).shape),
                      "do not match as q and k, or their value and its cotangent (attention_grad)", 0, 1);
        }
        default: return fail(no_shape_rule);
      }
    case op_kind::random:
      if (in(1).dt != dtype::i64 || in(1).shape.rank != 0) return fail("is not a rank-0 i64 seed", 1);
      return {dtype::f32, in(0).shape, nullptr};
    case op_kind::composite:
      switch (x.o) {
        case op::softmax:
        case op::log_softmax:
          if (!has_axis(0, x.axis)) return fail("has no such axis (softmax's)");
          return {in(0).dt, in(0).shape, nullptr};
        case op::layer_norm:
          return from(in(0).dt, layer_norm_shape(in(0).shape, in(1).shape, in(2).shape),
                      "do not match (gamma must cover x's trailing axes)", 0, 1);
        case op::linear:
          return from(in(0).dt, linear_shape(in(0).shape, in(1).shape, in(2).shape), "do not match as x [..., in] and w [out, in]", 0, 1);
        case op::mse_loss:
          return from(in(0).dt, {dims{}, broadcast(in(0).shape, in(1).shape).ok}, "cannot be broadcast together", 0, 1);
        case op::cross_entropy:
          return from(in(0).dt, cross_entropy_shape(in(0).shape, in(1).shape), "do not match as logits [n, classes] and labels [n]",
                      0, 1);
        case op::conv2d:
          return from(in(0).dt, conv2d_shape(in(0).shape, in(1).shape, in(2).shape, window_of(x)),
                      "do not match as conv2d's input and weight", 0, 1);
        case op::max_pool2d:
        case op::avg_pool2d: return from(in(0).dt, pool2d_shape(in(0).shape, window_of(x)), "does not fit the pooling window");
        case op::sdpa:
        case op::sdpa_causal:
          if (in(0).dt != in(1).dt || in(1).dt != in(2).dt || !is_floating(in(0).dt))
            return fail("are not of one floating-point dtype (attention's q and k; v too)", 0, 1);
          if (in(3).dt != dtype::boolean && in(3).dt != in(0).dt) return fail("is neither bool nor of q's dtype (attention's mask)", 3);
          return from(in(0).dt, sdpa_shape(in(0).shape, in(1).shape, in(2).shape, in(3).shape),
                      "do not match as attention's q [..., h, tq, d] and k [..., hk, tk, d]", 0, 1);
        default: return fail(no_shape_rule);
      }
    case op_kind::autodiff:
      switch (x.o) {
        case op::detach: return {in(0).dt, in(0).shape, nullptr};
        case op::grad:
          if (in(0).shape.rank != 0) return fail("is not the shape of a rank-0 loss (grad's)");
          return {in(1).dt, in(1).shape, nullptr};
        case op::jvp:
          if (!(in(2).shape == in(1).shape)) return fail("differ (jvp's input and tangent)", 1, 2);
          return {in(0).dt, in(0).shape, nullptr};
        case op::custom:
          if (in(3).o != op::cotangent) return fail("belong to a custom node without a cotangent marker", 3);
          return {in(0).dt, in(0).shape, nullptr};
        default: return {x.dt, x.shape, nullptr};  // the cotangent marker
      }
    case op_kind::tuple: return fail("belong to a tuple node inside a graph", cite_none);
  }
  return fail(no_shape_rule, cite_none);
}

namespace detail {
/// The first op of the catalogue that infer has no rule for, or -1. (Operands of one f32
/// element: a rule may refuse them, but only a missing one answers no_shape_rule.)
constexpr int first_op_without_shape_rule() {
  const dims scalar{};
  for (int i = 0; i < op_count; ++i) {
    node n;
    n.o = static_cast<op>(i);
    for (int j = 0; j < n.nin(); ++j) n.in[j] = j;
    const char* e = infer(n, [&](int) { return operand{op::input, dtype::f32, scalar}; }).error;
    // (by their characters: clang does not compare the addresses of string literals in
    // constant evaluation)
    if (e && std::string_view(e) == std::string_view(no_shape_rule)) return i;
  }
  return -1;
}
static_assert(first_op_without_shape_rule() < 0,
              "kiln: an op of graph/ops.hpp has no shape rule in graph.hpp's infer (the value compared is the op's "
              "position in enum kiln::op)");
}  // namespace detail

/// Checks a graph's invariants; returns nullptr when valid, else what is wrong. Runs after
/// every stage of the pipeline in tests and with KILN_CHECK_PASSES: `static_assert(!check_graph(g))`.
template <class G>
constexpr const char* check_graph(const G& g) {
  const int n = static_cast<int>(g.nodes.size());
  cvec<int> slot_use(static_cast<std::size_t>(g.leaves > 0 ? g.leaves : 0), 0);
  for (int i = 0; i < n; ++i) {
    const node& x = g.nodes[i];
    if (x.shape.rank < 0 || x.shape.rank > max_rank) return "node shape has an invalid rank";
    for (int j = 0; j < x.nin(); ++j)
      if (x.in[j] < 0 || x.in[j] >= i) return "node input is not an earlier node";
    for (int j = x.nin(); j < max_inputs; ++j)
      if (x.in[j] != -1) return "node has more inputs than its op takes";
    switch (kind_of(x.o)) {
      case op_kind::leaf:
        if (x.slot < 0 || x.slot >= g.leaves) return "leaf slot out of range";
        if (++slot_use[x.slot] > 1) return "a leaf slot is used twice";
        if ((x.o == op::input || x.o == op::param) && x.label().empty()) return "placeholder without a name";
        continue;
      case op_kind::constant:
        if (x.shape.rank != 0 || x.slot != -1) return "constant is not a rank-0 value without a slot";
        continue;
      default: break;
    }
    const inferred r = infer(x, [&](int j) -> const node& { return g.nodes[x.in[j]]; });
    if (r.error) return r.error;
    if (r.dt != x.dt) return "node dtype does not follow from its inputs";
    if (!(r.shape == x.shape)) return "node shape does not follow from its inputs";
  }
  if (g.outputs.size() == 0) return "graph has no output";
  for (int o : g.outputs)
    if (o < 0 || o >= n) return "graph output out of range";
  return nullptr;
}

/// Counts the nodes of one op (a convenience for static_assert in tests and explain output).
template <class G>
constexpr int count_op(const G& g, op o) {
  int c = 0;
  for (const node& x : g.nodes) c += x.o == o;
  return c;
}

}  // namespace kiln
