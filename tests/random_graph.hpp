// The random graph generator shared by the random-graph tests: random ops on leaves a
// [rows, cols], b [1, cols], c [rows, 1] (and, where a graph asks for them, w [cols, cols] and an
// i64 index i [rows]). Every value the generator keeps for later steps is shaped [rows or 1,
// cols or 1], so any two broadcast together. The ops cover every primitive and high-level op
// kind, repeated subexpressions and identities that canonicalisation removes, matmuls (with a
// transposed, a reshaped and a leaf operand), movement (permutes, slices, concats, broadcasts,
// reshape round trips, gather, iota, numel, rand), casts, integer graphs (wrapping arithmetic,
// comparisons, where), bf16 graphs, and gradients (grad and jvp nodes, which passes::
// to_primitives expands). Everything is constexpr, so a graph can be generated inside constant
// evaluation from a compile-time seed and compiled by the CPU backend (test_cpu_random*), or at
// run time from kt::rng() (test_random_graphs).
#pragma once

#include "support.hpp"

#include <cstdint>
#include <string_view>
#include <vector>

namespace kt {

/// SplitMix64: a small generator that also works in constant evaluation.
struct splitmix {
  std::uint64_t state = 0;
  constexpr std::uint64_t operator()() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

/// What kind of graph to make.
struct graph_options {
  kiln::dtype dt = kiln::f64;  ///< the leaves' dtype (i32, i64, bf16, f32, f64)
  bool dynamic_rows = false;   ///< a and c have a dynamic first extent (c's may then be 1 where a's is not)
  bool movement = true;        ///< matmuls, movement ops and casts among the steps
  bool matmul = true;          ///< (with movement) matmuls among them
  bool grad = false;           ///< outputs: the value, the gradients of a loss of it, sometimes a jvp
  kiln::index_t rows = 0, cols = 0;  ///< the extents (0: 1 to 5 rows, 1 to 6 columns; see medium)
  bool medium = false;         ///< extents of 7 to 130 (vector loops with tails, blocked matmuls) instead
  int max_steps = 30;          ///< 1 to max_steps random steps
  bool row_softmax = false;    ///< one more output: softmax(a - c) along the rows (a kernel of its own)
};

template <class Rng>
struct random_graph {
  kiln::passes::builder b;
  Rng rng;
  graph_options opt;
  kiln::cvec<int> pool;  // nodes that may be used as operands
  kiln::index_t R = 1, C = 1;  // rows (maybe dyn) and columns
  int w = -1, idx = -1;  // the leaves w and i, once made

  using op = kiln::op;
  using dims = kiln::dims;

  constexpr int coin(int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); }
  constexpr int pick() { return pool[static_cast<std::size_t>(coin(static_cast<int>(pool.size())))]; }
  constexpr kiln::dtype dt() const { return opt.dt; }
  constexpr bool integral() const { return kiln::is_integral(opt.dt); }
  constexpr const dims& shape(int x) const { return b.at(x).shape; }
  constexpr bool static_rows() const { return R != kiln::dyn; }

  constexpr int leaf(const char* name, kiln::dtype t, dims s) {
    kiln::node n = kiln::passes::builder::make(op::input, t, s);
    n.set_name(name);
    n.slot = b.g.leaves++;
    return b.emit(n);
  }
  constexpr int constant() {
    if (integral()) {  // large ones make products wrap
      const double choices[] = {0.0, 1.0, -1.0, 3.0, -7.0, 65537.0, 2147483647.0};
      return b.constant(choices[coin(7)], dt());
    }
    const double choices[] = {0.0, -0.0, 1.0, 2.0, 0.5, -3.0};
    return b.constant(choices[coin(6)], dt());
  }
  constexpr int positive(int x) { return b.add(b.unary(op::abs, x), b.constant(1, dt())); }
  /// A float product over k terms divided by k (as attention scales its scores), so that chains
  /// of them keep values whose roundings do not cancel into large differences; integers as they
  /// are (their products wrap).
  constexpr int scaled(int x, kiln::index_t k) { return integral() ? x : b.mul(x, b.constant(1.0 / static_cast<double>(k), dt())); }
  /// x broadcast to [rows, cols].
  constexpr int full(int x) { return b.broadcast_to(x, dims{R, C}); }
  constexpr int binary_any(int x, int y) {
    const op o[] = {op::add, op::sub, op::mul, op::max, op::min};
    return b.binary(o[coin(5)], x, y);
  }
  /// x compared with y; floats with y + 0.375, so that values that are equal by construction
  /// (log_softmax of a log_softmax) are not compared: two backends may round them apart.
  constexpr int comparison(int x, int y) {
    const op o[] = {op::eq, op::ne, op::lt, op::le, op::gt, op::ge};
    return b.binary(o[coin(6)], x, integral() ? y : b.add(y, b.constant(0.375, dt())));
  }

  /// One random op on operands from the pool.
  constexpr int step() {
    if (opt.movement && coin(3) == 0) return movement_step();
    return integral() ? integer_step() : float_step();
  }

  constexpr int float_step() {
    const int x = pick();
    switch (coin(19)) {
      case 0: {
        const op u[] = {op::neg, op::abs, op::tanh, op::sigmoid, op::relu, op::gelu, op::gelu_tanh,
                        op::silu, op::erf, op::sin, op::cos};
        const op o = u[coin(11)];
        // (sin and cos of values in (-3, 3): of a large value, they would turn the rounding of
        // their argument into differences far above the rounding of their result)
        if (o == op::sin || o == op::cos) return b.unary(o, b.mul(b.unary(op::tanh, x), b.constant(3, dt())));
        return b.unary(o, x);
      }
      case 1: return b.unary(op::exp, b.unary(op::tanh, x));
      case 2: {
        const op u[] = {op::log, op::sqrt, op::rsqrt, op::reciprocal};
        return b.unary(u[coin(4)], positive(x));
      }
      case 3:
      case 4: {
        const int y = coin(4) == 0 ? constant() : pick();
        return coin(2) ? binary_any(x, y) : binary_any(y, x);
      }
      case 5: return b.div(x, positive(pick()));
      case 6:  // (not for bf16: a comparison turns a rounding step into a jump, and eager's var,
               // softmax ... of bf16 values round apart from their decompositions)
        if (dt() == kiln::bf16) return b.binary(op::max, x, pick());
        return b.where(comparison(x, pick()), x, pick());
      case 7: {  // a reduction that keeps the rank, so the result still broadcasts
        const op r[] = {op::sum, op::mean, op::amax, op::amin};
        return b.reduce(r[coin(4)], x, 1u << coin(2), true);
      }
      case 8: {
        kiln::node n = kiln::passes::builder::make(coin(2) ? op::softmax : op::log_softmax, dt(), shape(x));
        n.in[0] = x;
        n.axis = coin(2);
        return b.emit(n);
      }
      case 9: {  // a repeated subexpression, operands swapped: CSE must merge it
        const int y = pick();
        b.add(x, y);
        return b.add(y, x);
      }
      case 10: {
        // (f32 and bf16: of values in (-3, 3). The decomposition rounds the mean to the dtype
        // and eager does not: the variance of a row of equal values 123904 is 315392 in bf16)
        kiln::node n = kiln::passes::builder::make(op::var, dt(), shape(x));
        n.in[0] = dt() == kiln::f64 ? x : b.mul(b.unary(op::tanh, x), b.constant(3, dt()));
        n.axes = 2u;
        n.keepdim = true;
        n.value = 1;
        n.shape = kiln::reduce_shape(shape(x), n.axes, true).shape;
        return b.emit(n);
      }
      case 11: return b.unary(op::neg, b.unary(op::neg, x));
      case 12: return b.mul(x, b.constant(1, dt()));
      case 13: {  // transpose twice (composes to the identity) through a reshape round trip
        const dims s = shape(x);
        return b.reshape(b.transpose(b.transpose(b.reshape(x, s))), s);
      }
      case 14: return b.binary(op::pow, positive(x), b.unary(op::tanh, pick()));  // exponents in (-1, 1)
      case 15: return b.add(b.reduce(op::sum, x, 3u, true), pick());  // (a [1, 1] value)
      default: {
        const int y = pick();
        return b.add(b.mul(x, constant()), y);
      }
    }
  }

  constexpr int integer_step() {
    const int x = pick();
    switch (coin(12)) {
      case 0: {
        const op u[] = {op::neg, op::abs, op::relu};
        return b.unary(u[coin(3)], x);
      }
      case 1:
      case 2: {
        const int y = coin(3) == 0 ? constant() : pick();
        return coin(2) ? binary_any(x, y) : binary_any(y, x);
      }
      case 3: return b.where(comparison(x, pick()), x, coin(2) ? pick() : constant());
      case 4: return b.add(b.cast(comparison(x, pick()), dt()), pick());
      case 5: {
        const op r[] = {op::sum, op::amax, op::amin};
        return b.reduce(r[coin(3)], x, 1u << coin(2), true);
      }
      case 6: return b.binary(op::pow, x, b.constant(coin(4), dt()));
      case 7: {  // the other integer width and back (wrapping), or f64 and back (exact arithmetic there)
        if (coin(2)) return b.cast(b.add(b.cast(x, dt() == kiln::i32 ? kiln::i64 : kiln::i32), b.cast(pick(), dt() == kiln::i32 ? kiln::i64 : kiln::i32)), dt());
        const int f = b.cast(x, kiln::f64);
        return b.cast(b.mul(f, b.constant(coin(2) ? 0.5 : -3, kiln::f64)), dt());  // (floats to integers saturate)
      }
      case 8: {
        const int y = pick();
        b.mul(x, y);
        return b.mul(y, x);
      }
      case 9: return b.unary(op::neg, b.unary(op::neg, x));
      case 10: return b.sub(x, x);
      default: return b.add(b.mul(x, constant()), pick());
    }
  }

  constexpr int movement_step() {
    const int x = pick();
    const dims sx = shape(x);
    switch (coin(9)) {
      case 0: {  // transposed operands, transposed back
        const int t = b.transpose(x);
        const int z = coin(3) == 0 ? b.reduce(integral() ? op::sum : op::mean, t, 1u << coin(2), true)
                                   : binary_any(t, b.transpose(pick()));
        return b.transpose(z);
      }
      case 1: {  // a slice of x (maybe strided) and one of y, joined back to the extent they came from
        const int y = static_rows() ? pick() : x;  // (dyn rows: concat needs equal extents, which y's may not be)
        const int axis = static_rows() && coin(2) ? 0 : 1;
        const kiln::index_t n = axis == 0 ? R : C;
        dims to = kiln::broadcast(sx, shape(y)).shape;
        to.e[axis] = n;
        const int fx = b.broadcast_to(x, to), fy = b.broadcast_to(y, to);
        const kiln::index_t off = coin(static_cast<int>(n)), stride = 1 + coin(3);
        const int part = b.slice(fx, axis, off, n, stride);
        const kiln::index_t got = shape(part).e[axis];
        if (got == n) return part;
        const kiln::index_t from = coin(static_cast<int>(got) + 1);  // n - got of fy's, from there
        const int rest = b.slice(fy, axis, from, from + n - got, 1);
        return coin(2) ? b.concat(part, rest, axis) : b.concat(rest, part, axis);
      }
      case 2: {  // reshape round trips: [r, c] as [r, c/2, 2] permuted, or flat, or as [c, r]
        if (sx.e[1] % 2 == 0) {
          const dims s3{sx.e[0], sx.e[1] / 2, 2};
          kiln::axis_perm p{};
          p.set(0, 0);
          p.set(1, 2);
          p.set(2, 1);
          const int t = b.permute(b.reshape(x, s3), p);
          const int y = pick();
          const bool same = shape(y) == sx;
          const int z = binary_any(t, same && coin(2) ? b.permute(b.reshape(y, s3), p) : constant());
          return b.reshape(b.permute(z, p), sx);
        }
        if (!sx.is_static()) return b.reshape(b.unary(integral() ? op::neg : op::abs, b.reshape(x, dims{kiln::dyn})), sx);
        const int flat = binary_any(b.reshape(x, dims{sx.numel()}), constant());
        return b.reshape(coin(2) ? flat : b.reshape(flat, dims{sx.e[1], sx.e[0]}), sx);
      }
      case 3:
      case 4: {  // matmuls: x y^T z, x w, and rows of x times rows of y as a batch
        if (!opt.matmul || !static_rows()) return b.add(b.transpose(b.transpose(x)), pick());
        const int fx = full(x);
        switch (coin(3)) {
          case 0: {
            const int p = scaled(b.matmul(fx, b.transpose(full(pick()))), C);  // [R, R]
            return scaled(b.matmul(p, full(pick())), R);
          }
          case 1: {
            if (w < 0) w = leaf("w", dt(), dims{C, C});
            return scaled(coin(2) ? b.matmul(fx, w) : b.matmul(fx, b.transpose(w)), C);
          }
          default: {
            const int l = b.reshape(fx, dims{R, 1, C}), r = b.reshape(full(pick()), dims{R, C, 1});
            return b.reshape(scaled(b.matmul(l, r), C), dims{R, 1});
          }
        }
      }
      case 5: {  // rows of x picked by an index leaf (values in [0, rows))
        if (!static_rows()) return b.sub(x, pick());
        if (idx < 0) idx = leaf("i", kiln::i64, dims{R});
        return b.gather(b.broadcast_to(x, dims{R, sx.e[1]}), idx);
      }
      case 6: {  // iota along an axis, as the graph's dtype
        const int axis = coin(2);
        int i = b.cast(b.iota(x, axis, kiln::i64), dt());
        if (axis == 0) i = b.reshape(i, dims{sx.e[0], 1});
        return binary_any(x, i);
      }
      case 7: {  // casts: through another dtype and back
        if (integral()) return b.cast(b.cast(x, kiln::boolean), dt());
        if (dt() == kiln::f64) {
          const int r = b.cast(b.cast(x, coin(2) ? kiln::f32 : kiln::bf16), dt());
          if (!opt.grad) return b.add(r, pick());
          // with gradients, straight through: x + detach(r - x), whose gradient is not rounded
          // to f32 or bf16 (the order of the sums before that rounding differs between backends)
          kiln::node d = kiln::passes::builder::make(op::detach, dt(), sx);
          d.in[0] = b.sub(r, x);
          return b.add(x, b.emit(d));
        }
        return b.cast(b.mul(b.cast(x, kiln::f64), b.cast(pick(), kiln::f64)), dt());
      }
      default: {  // element counts, and (floats) Philox uniforms
        if (integral()) return b.mul(x, b.numel(pick(), 1u << coin(2), dt()));
        if (coin(2)) return b.div(x, b.numel(pick(), 1u << coin(2), dt()));
        kiln::node seed = kiln::passes::builder::make(op::constant, kiln::i64, dims{});
        seed.value = coin(1000);
        const int s = b.emit(seed);
        kiln::node r = kiln::passes::builder::make(op::rand, kiln::f32, sx);
        r.in[0] = x;
        r.in[1] = s;
        r.axes = static_cast<std::uint32_t>(coin(4));
        return b.add(x, b.cast(b.emit(r), dt()));
      }
    }
  }
};

/// A random graph of 1 to opt.max_steps steps on leaves a, b, c (slots 0, 1, 2; w and i after
/// them where used). Its outputs: the value, sometimes another (a leaf, a view, the value again);
/// with opt.grad the gradients of a rank-0 loss (the sum of the value times another) with respect
/// to every floating leaf, sometimes a jvp.
template <class Rng>
constexpr kiln::graph make_random_graph(Rng rng, graph_options opt = {}) {
  random_graph<Rng> r{{}, rng, opt, {}};
  constexpr kiln::index_t medium[] = {7, 16, 17, 33, 64, 130};
  r.C = opt.cols > 0 ? opt.cols : opt.medium ? medium[r.coin(6)] : 1 + r.coin(6);
  r.R = opt.dynamic_rows ? kiln::dyn : opt.rows > 0 ? opt.rows : opt.medium ? medium[r.coin(6)] : 1 + r.coin(5);
  const int a = r.leaf("a", opt.dt, kiln::dims{r.R, r.C}), bl = r.leaf("b", opt.dt, kiln::dims{1, r.C}),
            c = r.leaf("c", opt.dt, kiln::dims{r.R, 1});
  r.pool = {a, bl, c};
  const int steps = 1 + r.coin(opt.max_steps);
  for (int s = 0; s < steps; ++s) r.pool.push_back(r.step());
  const int out = r.b.add(r.pool.back(), r.pool[r.pool.size() / 2]);
  r.b.g.outputs = {out};
  if (r.coin(4) == 0) {  // another output that no kernel may compute: a value (maybe a leaf), a view, out again
    const int k = r.coin(3);
    r.b.g.outputs.push_back(k == 0 ? r.pick() : k == 1 ? r.b.transpose(r.pick()) : out);
  }
  if (opt.row_softmax) {
    kiln::node n = kiln::passes::builder::make(kiln::op::softmax, opt.dt, kiln::dims{r.R, r.C});
    n.in[0] = r.b.sub(a, c);
    n.axis = 1;
    r.b.g.outputs.push_back(r.b.emit(n));
  }
  if (opt.grad && kiln::is_floating(opt.dt)) {
    const int loss = r.b.reduce(kiln::op::sum, r.b.mul(out, r.pick()), 3u, false);
    for (const int t : {a, bl, c, r.w}) {
      if (t < 0) continue;
      kiln::node g = kiln::passes::builder::make(kiln::op::grad, opt.dt, r.shape(t));
      g.in[0] = loss;
      g.in[1] = t;
      r.b.g.outputs.push_back(r.b.emit(g));
    }
    if (r.coin(2)) {  // the derivative of out along u at a
      kiln::node j = kiln::passes::builder::make(kiln::op::jvp, opt.dt, r.shape(out));
      j.in[0] = out;
      j.in[1] = a;
      j.in[2] = r.full(r.pick());
      r.b.g.outputs.push_back(r.b.emit(j));
    }
  }
  return r.b.g;
}

/// Fresh random values for the leaves of a graph from make_random_graph: floats in [-2, 2),
/// integers small (b, c, w) or over most of their range (a: products and sums wrap), indices in
/// [0, rows). rows and c_rows stand for dyn extents (c_rows for c's).
template <class G>
std::vector<kiln::any_tensor> random_leaves(const G& g, kiln::index_t rows, kiln::index_t c_rows) {
  std::vector<kiln::any_tensor> leaves(static_cast<std::size_t>(g.leaves));
  for (const kiln::node& n : g.nodes) {
    if (n.o != kiln::op::input) continue;
    kiln::dims s = n.shape;
    const std::string_view name = n.label();
    for (int i = 0; i < s.rank; ++i)
      if (s.e[i] == kiln::dyn) s.e[i] = name == "c" ? c_rows : rows;
    double lo = -2, hi = 2;
    if (name == "i") lo = 0, hi = static_cast<double>(rows);
    else if (name == "a" && n.dt == kiln::i32) lo = -2147483648.0, hi = 2147483647.0;
    else if (name == "a" && n.dt == kiln::i64) lo = -4.0e18, hi = 4.0e18;
    else if (kiln::is_integral(n.dt)) lo = -8, hi = 8;
    leaves[static_cast<std::size_t>(n.slot)] = random_tensor(n.dt, s, lo, hi);
  }
  return leaves;
}

/// The graph the eager reference runs: g itself, or, with grad and jvp nodes, g decomposed and
/// differentiated without further simplification (as kiln::eager_graph does for expressions).
inline kiln::graph reference_graph(const kiln::graph& g) {
  if (!kiln::passes::has_autodiff(g)) return g;
  return kiln::passes::remove_dead(kiln::passes::differentiate(kiln::passes::decompose(g)));
}

/// How far a backend may be from the eager reference on the unoptimised graph, for a random
/// graph of dtype dt, as measured by graph_difference (integers exactly). f32 and bf16 values are
/// compared at the scale of their output: the graphs' values grow (sums, products, variances of
/// them) and cancel again, so their roundings may be far above a small result's own (an f32
/// result 7e-4 away from eager, relative to 1 + itself, in 180000 graphs). bf16 this way catches
/// gross errors only: eager computes var, mean, softmax ... of bf16 values in double and rounds
/// once, where their decompositions round every step to bf16, and later steps amplify that;
/// cpu_random.hpp checks bf16 more closely. Soaks of test_random_graphs (30000 graphs of each
/// kind) met at most 1.2e-15 (f64), 6e-15 (f64 with gradients), 9e-7 (f32) and 0.03 (bf16).
constexpr double graph_tolerance(kiln::dtype dt) {
  return dt == kiln::f64 ? 1e-9 : dt == kiln::f32 ? 1e-5 : 0.25;
}
/// difference(want, got); for f32 and bf16, the largest |want - got| over 1 + the largest |want|.
inline double graph_difference(const kiln::any_tensor& want, const kiln::any_tensor& got) {
  const double d = difference(want, got);
  if ((want.dt() != kiln::bf16 && want.dt() != kiln::f32) || std::isinf(d)) return d;
  const std::vector<double> w = values_of(want), v = values_of(got);
  double scale = 0, worst = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(w[i]) || std::isinf(w[i])) continue;  // (difference checked that they match)
    scale = std::max(scale, std::fabs(w[i]));
    worst = std::max(worst, std::fabs(w[i] - v[i]));
  }
  return worst / (1 + scale);
}
/// How far a bf16 result may be from eager's on the same primitive graph, which rounds where the
/// backend rounds: exp, tanh, sums ... that differ in their last f32 bits now and then move a
/// bf16 rounding by a step, which later steps may amplify (so far they have agreed exactly).
inline constexpr double bf16_prims_tolerance = 1.0 / 32;

}  // namespace kt
