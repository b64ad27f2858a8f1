// kiln/passes/canonicalize.hpp: simplifications that never change a result, iterated to a
// fixed point:
//   - constant folding of pointwise ops on constants (in double, rounded to the node's dtype;
//     for + - * / of f32 that equals f32 arithmetic exactly, as double has > 2 * 24 + 2 bits);
//   - identities exact in floating point: x * 1, x / 1, x + (-0.0), x - (+0.0) (x + 0 and
//     x - 0 only for integers, since -0.0 + 0.0 = +0.0), neg(neg x), casts to the same dtype,
//     reshape of reshape, permute of permute, identity reshapes, permutes and broadcasts;
//   - the transpose of a matmul that nothing else reads becomes the matmul of the transposes
//     in the other order, (a b)^T = b^T a^T (the same products summed in the same order): a
//     weight gradient is computed in the weight's layout, where its update can be fused;
//   - broadcast simplification: an explicit broadcast feeding a pointwise op that would
//     broadcast its operand to the same shape anyway is dropped;
//   - a pointwise op on a reshape (and rank-0 values) is computed before the reshape, where
//     it can fuse with the reshape's producer (relu after a convolution's matmul);
//   - common-subexpression elimination by hash-consing, with commutative operands in a
//     canonical order (so x * y and y * x become one node); placeholders of the same name are
//     one node;
//   - dead-node removal (leaves keep their slots, so the leaf table does not change).
#pragma once

#include <bit>
#include <cstdint>

#include "../core/cvec.hpp"
#include "../core/dtype.hpp"
#include "../graph/graph.hpp"
#include "builder.hpp"

namespace kiln::passes {

namespace detail {

/// Rounds a double to what dtype dt can hold (the value a node of that dtype would store).
constexpr double round_to(double v, dtype dt) {
  switch (dt) {
    case dtype::boolean: return v != 0 ? 1 : 0;
    case dtype::i32: return static_cast<double>(static_cast<std::int32_t>(static_cast<std::int64_t>(v)));
    case dtype::i64: return static_cast<double>(static_cast<std::int64_t>(v));
    case dtype::bf16: return static_cast<double>(static_cast<float>(bfloat16(static_cast<float>(v))));
    case dtype::f32: return static_cast<double>(static_cast<float>(v));
    case dtype::f64: return v;
  }
  return v;
}

constexpr bool is_nan(double v) { return v != v; }

/// Folds a pointwise op on constant values; false when it cannot (an op with no constexpr rule,
/// or an integer division, which would need the integer semantics of the backends).
constexpr bool fold(op o, dtype in_dt, dtype out_dt, const double* v, double& r) {
  const bool integral = !is_floating(in_dt);
  switch (o) {
    case op::neg: r = -v[0]; break;
    case op::abs: r = (v[0] < 0 ? -v[0] : v[0]) + 0.0; break;  // abs(-0.0) = +0.0
    case op::reciprocal: r = 1 / v[0]; break;
    case op::add: r = v[0] + v[1]; break;
    case op::sub: r = v[0] - v[1]; break;
    case op::mul: r = v[0] * v[1]; break;
    case op::div:
      if (integral) return false;
      r = v[0] / v[1];
      break;
    case op::max: r = is_nan(v[0]) || is_nan(v[1]) ? v[0] + v[1] : v[0] < v[1] ? v[1] : v[0]; break;
    case op::min: r = is_nan(v[0]) || is_nan(v[1]) ? v[0] + v[1] : v[1] < v[0] ? v[1] : v[0]; break;
    case op::eq: r = v[0] == v[1]; break;
    case op::ne: r = v[0] != v[1]; break;
    case op::lt: r = v[0] < v[1]; break;
    case op::le: r = v[0] <= v[1]; break;
    case op::gt: r = v[0] > v[1]; break;
    case op::ge: r = v[0] >= v[1]; break;
    case op::where: r = v[0] != 0 ? v[1] : v[2]; break;
    case op::cast: r = v[0]; break;
    default: return false;
  }
  // integers beyond 2^53 are not exact in double, and out-of-range conversions are undefined
  if ((integral || is_integral(out_dt)) && !(r <= 9007199254740992.0 && r >= -9007199254740992.0)) return false;
  r = round_to(r, out_dt);
  return true;
}

constexpr bool same_bits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

/// Whether two nodes compute the same value (same op, inputs and attributes). Leaves other
/// than named placeholders are never equal to another node: their values come from outside.
constexpr bool same_node(const node& a, const node& b) {
  if (a.o != b.o || a.dt != b.dt || a.in[0] != b.in[0] || a.in[1] != b.in[1] || a.in[2] != b.in[2] ||
      a.in[3] != b.in[3] || a.in[4] != b.in[4] || a.in[5] != b.in[5] || !(a.shape == b.shape))
    return false;
  if (a.o == op::bound || a.o == op::scalar) return false;
  if (a.o == op::input || a.o == op::param) return a.label() == b.label();
  return same_attributes(a, b);  // (a constant's value among them)
}

/// A hash of what same_node compares (one expression where it can be: in constant evaluation
/// every statement is a step).
constexpr std::uint64_t hash_node(const node& n) {
  constexpr std::uint64_t p = 1099511628211ull;
  // (every input: graph.hpp's static_assert on max_inputs names this too)
  std::uint64_t h = (((((((std::uint64_t{static_cast<std::uint8_t>(n.o)} << 8 | static_cast<std::uint8_t>(n.dt)) * p ^
                          static_cast<std::uint32_t>(n.in[0])) * p ^ static_cast<std::uint32_t>(n.in[1])) * p ^
                        static_cast<std::uint32_t>(n.in[2])) * p ^ static_cast<std::uint32_t>(n.in[3])) * p ^
                      static_cast<std::uint32_t>(n.in[4])) * p ^ static_cast<std::uint32_t>(n.in[5])) * p;
  // some attributes, not graph.hpp's whole list: a hash need not cover them all (same_node
  // compares them all), and hashing all seven words per node and round cost g++ 2% more memory
  // on test_autodiff_nn
  h = (h ^ (std::uint64_t{n.axes} << 32 | static_cast<std::uint32_t>(n.axis))) * p;
  if (n.o == op::constant) h = (h ^ std::bit_cast<std::uint64_t>(n.value)) * p;
  else if (n.o == op::input || n.o == op::param)
    for (char ch : n.label()) h = (h ^ static_cast<unsigned char>(ch)) * p;
  return h;
}

/// Open-addressing table of node indices for hash-consing (constexpr-friendly).
struct cse_table {
  cvec<int> slots;
  int shift = 60;
  constexpr explicit cse_table(std::size_t n) {
    std::size_t cap = 16;
    while (cap < 2 * n + 2) {
      cap *= 2;
      --shift;
    }
    slots.assign(cap, -1);
  }
  /// The index of a node equal to n among `nodes`, or -1 (and n's slot is remembered for
  /// `index`, which the caller then appends).
  constexpr int find_or_insert(const node* nodes, const node& n, int index) {
    int* slot = slots.data();
    const std::size_t mask = slots.size() - 1;
    for (std::size_t s = (hash_node(n) * 0x9e3779b97f4a7c15ull) >> shift;; s = (s + 1) & mask) {
      const int at = slot[s];
      if (at < 0) {
        slot[s] = index;
        return -1;
      }
      if (same_node(nodes[at], n)) return at;
    }
  }
};

struct simplifier {
  builder& b;

  constexpr const node& at(int i) const { return b.at(i); }
  constexpr bool is_const(int i, double v) const {
    const int k = constant_under_shapes(b.g.nodes, i);
    return k >= 0 && same_bits(at(k).value, v);
  }
  constexpr bool is_zero(int i) const {
    const int k = constant_under_shapes(b.g.nodes, i);
    return k >= 0 && at(k).value == 0;
  }

  /// A node that already computes n's value exactly, or -1.
  constexpr int replace(const node& n) const {
    const auto& in = n.in;
    const auto same_as = [&](int x) { return at(x).dt == n.dt && at(x).shape == n.shape ? x : -1; };
    const bool integral = !is_floating(n.dt);
    switch (n.o) {
      case op::mul:
        if (is_const(in[1], 1)) return same_as(in[0]);
        if (is_const(in[0], 1)) return same_as(in[1]);
        break;
      case op::div:
        if (is_const(in[1], 1)) return same_as(in[0]);
        break;
      case op::add:
        if (is_const(in[1], -0.0) || (integral && is_zero(in[1]))) return same_as(in[0]);
        if (is_const(in[0], -0.0) || (integral && is_zero(in[0]))) return same_as(in[1]);
        break;
      case op::sub:
        if (is_const(in[1], 0.0) || (integral && is_zero(in[1]))) return same_as(in[0]);
        break;
      case op::neg:
        if (at(in[0]).o == op::neg) return same_as(at(in[0]).in[0]);
        break;
      case op::cast:
      case op::broadcast:  // a dyn target extent keeps the source's: equal shapes are identities
        return same_as(in[0]);
      case op::reshape: {  // with at most one dyn extent, equal shapes mean equal extents
        int dyns = 0;
        for (int i = 0; i < n.shape.rank; ++i) dyns += n.shape.e[i] == dyn;
        if (dyns <= 1) return same_as(in[0]);
        break;
      }
      case op::permute: {
        bool identity = true;
        for (int i = 0; i < n.shape.rank; ++i) identity = identity && n.perm[i] == i;
        if (identity) return same_as(in[0]);
        break;
      }
      default: break;
    }
    return -1;
  }

  /// Rewrites n into a simpler equivalent node where a rule applies (its inputs may change).
  constexpr node rewrite(node n) const {
    const auto& in = n.in;
    // reshape of reshape: one reshape
    if (n.o == op::reshape && at(in[0]).o == op::reshape) n.in[0] = at(in[0]).in[0];
    // permute of permute: one composed permute
    if (n.o == op::permute && at(in[0]).o == op::permute) {
      const node& p = at(in[0]);
      axis_perm comp{};
      for (int i = 0; i < n.shape.rank; ++i) comp.set(i, p.perm[n.perm[i]]);
      n.perm = comp;
      n.in[0] = p.in[0];
    }
    // an explicit broadcast into a pointwise op that broadcasts by itself
    if (is_pointwise(n.o) && n.o != op::cast) {
      for (int j = 0, nj = n.nin(); j < nj; ++j) {
        if (at(in[j]).o != op::broadcast) continue;
        node m = n;
        m.in[j] = at(in[j]).in[0];
        dims s{};
        for (int k = 0, nk = m.nin(); k < nk; ++k) {
          const broadcast_result r = broadcast(s, at(m.in[k]).shape);
          s = r.ok ? r.shape : dims::poison();
        }
        if (s == n.shape) n = m;
      }
    }
    // canonical operand order for commutative ops: a constant last, else by index (so that the
    // layers of a model have one form whichever made a constant first: their kernels share code)
    if (is_commutative(n.o)) {
      const bool c0 = at(n.in[0]).o == op::constant, c1 = at(n.in[1]).o == op::constant;
      if (c0 != c1 ? c0 : n.in[1] < n.in[0]) {
        const int t = n.in[0];
        n.in[0] = n.in[1];
        n.in[1] = t;
      }
    }
    return n;
  }

  /// Folds n if all its inputs are constants; returns the constant node or n unchanged.
  constexpr node fold_constants(const node& n) const {
    if (!is_pointwise(n.o) && n.o != op::numel) return n;
    if (n.o == op::numel) {
      const dims& s = at(n.in[0]).shape;
      double count = 1;
      for (int i = 0; i < s.rank; ++i)
        if (n.axes & (1u << i)) {
          if (s.e[i] == dyn) return n;
          count *= static_cast<double>(s.e[i]);
        }
      node c = builder::make(op::constant, n.dt, dims{});
      c.value = round_to(count, n.dt);
      return c;
    }
    double v[3]{};
    for (int j = 0, nj = n.nin(); j < nj; ++j) {
      if (at(n.in[j]).o != op::constant) return n;
      v[j] = at(n.in[j]).value;
    }
    double r = 0;
    if (!fold(n.o, at(n.in[n.o == op::where ? 1 : 0]).dt, n.dt, v, r)) return n;
    node c = builder::make(op::constant, n.dt, dims{});
    c.value = r;
    return c;
  }
};

/// The operand of pointwise node n that is a reshape of n's shape when every other operand is
/// rank 0, else -1. (The op's result reshaped back has the reshape's target: as valid.)
constexpr int pointwise_of_reshape(const builder& b, const node& n) {
  if (!is_pointwise(n.o)) return -1;
  int j = -1;
  for (int k = 0, nk = n.nin(); k < nk; ++k) {
    const node& a = b.at(n.in[k]);
    if (j < 0 && a.o == op::reshape && a.shape == n.shape && a.shape.rank > 0) j = k;
    else if (a.shape.rank != 0) return -1;
  }
  return j;
}

/// What the sweep needs to know of an op, read from one table (computed from the catalogue):
/// a node whose op has no rule of its own, and none of whose operands is a broadcast, constant
/// or neg, can only be reordered (commutative ops) and hash-consed.
struct sweep_flags {
  static constexpr std::uint8_t commutative = 1, pointwise = 2, rules = 4, outside = 8, special = 16;
  std::uint8_t f[static_cast<int>(op::tuple) + 1]{};
};
inline constexpr sweep_flags sweep_table = [] {
  sweep_flags t;
  for (int i = 0; i <= static_cast<int>(op::tuple); ++i) {
    const op o = static_cast<op>(i);
    t.f[i] = static_cast<std::uint8_t>(
        (is_commutative(o) ? sweep_flags::commutative : 0) | (is_pointwise(o) ? sweep_flags::pointwise : 0) |
        (o == op::reshape || o == op::permute || o == op::broadcast || o == op::numel || o == op::cast
             ? sweep_flags::rules
             : 0) |
        (o == op::bound || o == op::scalar ? sweep_flags::outside : 0) |
        (o == op::broadcast || o == op::constant || o == op::neg ? sweep_flags::special : 0));
  }
  return t;
}();

/// One sweep: simplify, fold, hash-cons. Returns the new graph (dead nodes still in it).
/// Written for constant evaluation, where each statement and call is a step: raw pointers
/// into the arrays, one table read per node, and the rules only for nodes they may match.
constexpr graph sweep(const graph& g) {
  const std::size_t count = g.nodes.size();
  const node* src = g.nodes.data();
  builder b;
  b.g.leaves = g.leaves;
  b.g.nodes.reserve(count);
  simplifier s{b};
  cse_table table(count + count / 2);  // room for the nodes rewrites add
  cvec<int> to(count, -1);
  int* to_p = to.data();
  // simplifies n (unless plain: no rule can match it), folds it, and returns the node that
  // computes it: an existing one (an identity, or an equal node: hash-consing) or n, appended
  const auto put = [&](node& n, bool plain) {  // (n by reference: a copy allocates in constant evaluation)
    const std::uint8_t fl = sweep_table.f[static_cast<int>(n.o)];
    if (!plain) {
      n = s.fold_constants(s.rewrite(n));
      if (const int r = s.replace(n); r >= 0) return r;
    } else if ((fl & sweep_flags::commutative) && n.in[1] < n.in[0]) {  // canonical operand order
      const int t = n.in[0];
      n.in[0] = n.in[1];
      n.in[1] = t;
    }
    const int next = static_cast<int>(b.g.nodes.size());
    // values from outside (bound tensors, scalars) are never merged, not hashed
    const int found = (sweep_table.f[static_cast<int>(n.o)] & sweep_flags::outside)
                          ? -1
                          : table.find_or_insert(b.g.nodes.data(), n, next);
    if (found >= 0) return found;
    b.g.nodes.push_back(n);
    return next;
  };
  cvec<int> uses;  // readers, and 1 for being an output: counted when a rule first needs them
  for (std::size_t i = 0; i < count; ++i) {
    node n = src[i];
    const int k = n.nin();
    const std::uint8_t fl = sweep_table.f[static_cast<int>(n.o)];
    const node* at = b.g.nodes.data();
    bool plain = !(fl & sweep_flags::rules);
    bool reshaped = false;  // a pointwise op with a reshape operand
    for (int j = 0; j < k; ++j) {
      const int x = to_p[n.in[j]];
      n.in[j] = x;
      if (fl & sweep_flags::pointwise) {
        plain = plain && !(sweep_table.f[static_cast<int>(at[x].o)] & sweep_flags::special);
        reshaped = reshaped || at[x].o == op::reshape;
      }
    }
    // the transpose of a product read nowhere else is the product of the transposes, in the
    // other order: (a b)^T = b^T a^T (each element is the same sum of the same products).
    // A weight gradient, permute(x^T g), becomes g^T x in the weight's own layout, so the
    // optimizer's update can be the epilogue of the matmul that computes it.
    if (n.o == op::permute && src[src[i].in[0]].o == op::matmul && swaps_last_two(n)) {
      if (uses.empty()) {
        uses.assign(count, 0);
        for (std::size_t u = 0; u < count; ++u)
          for (int j = 0, m = src[u].nin(); j < m; ++j) ++uses[static_cast<std::size_t>(src[u].in[j])];
        for (int o : g.outputs) ++uses[static_cast<std::size_t>(o)];
      }
      const auto m = static_cast<std::size_t>(src[i].in[0]);
      const node& mm = src[m];
      if (uses[m] == 1 && src[mm.in[0]].shape.rank >= 2 && src[mm.in[1]].shape.rank >= 2) {
        const int ta = b.transpose(to_p[mm.in[0]]);
        const int tb = b.transpose(to_p[mm.in[1]]);
        n = b.with_inputs(builder::make(op::matmul, n.dt, n.shape), tb, ta);
        plain = true;
      }
    }
    // a pointwise op on one reshape (of the op's shape) and rank-0 values is the reshape of
    // the op on the reshape's input: relu(reshape(y)) becomes reshape(relu(y)), so that the op
    // can join the kernel that computes y (a convolution's matmul, as its epilogue)
    if (reshaped) {
      if (const int j = pointwise_of_reshape(b, n); j >= 0) {
        node inner = n;
        inner.in[j] = b.at(n.in[j]).in[0];
        inner.shape = b.at(inner.in[j]).shape;
        const int r = put(inner, false);
        n = b.with_inputs(builder::make(op::reshape, n.dt, n.shape), r);
        plain = false;
      }
    }
    to_p[i] = put(n, plain);
  }
  for (int o : g.outputs) b.g.outputs.push_back(to_p[o]);
  return b.g;
}

}  // namespace detail

/// Removes nodes no output depends on. Leaves stay (their slots index the leaf table).
/// (Raw pointers and one nin() a node: in constant evaluation each call and copy allocates.)
constexpr graph remove_dead(const graph& g) {
  const std::size_t n = g.nodes.size();
  const node* src = g.nodes.data();
  cvec<char> live(n, 0);
  char* lv = live.data();
  for (int o : g.outputs) lv[o] = 1;
  for (std::size_t i = n; i-- > 0;) {
    if (!lv[i]) continue;
    const node& x = src[i];
    for (int j = 0, k = x.nin(); j < k; ++j) lv[x.in[j]] = 1;
  }
  graph r;
  r.leaves = g.leaves;
  r.nodes.reserve(n);
  cvec<int> to(n, -1);
  int* tp = to.data();
  for (std::size_t i = 0; i < n; ++i) {
    if (!lv[i] && kind_of(src[i].o) != op_kind::leaf) continue;
    const int at = static_cast<int>(r.nodes.size());
    r.nodes.push_back(src[i]);
    node& x = r.nodes.data()[at];
    for (int j = 0, k = x.nin(); j < k; ++j) x.in[j] = tp[x.in[j]];
    tp[i] = at;
  }
  for (int o : g.outputs) r.outputs.push_back(tp[o]);
  return r;
}

/// The canonicalisation pass: sweeps until the graph stops changing.
constexpr graph canonicalize(graph g) {
  for (int round = 0; round < 16; ++round) {
    graph next = remove_dead(detail::sweep(g));
    const bool done = next.nodes.size() == g.nodes.size();
    g = static_cast<graph&&>(next);
    if (done) break;
  }
  return g;
}

}  // namespace kiln::passes
