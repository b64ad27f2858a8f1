// The random graph generator shared by the random-graph tests: random ops (every primitive
// and high-level op kind, repeated subexpressions, identities that canonicalisation removes)
// on three f64 leaves a [rows, cols], b [1, cols], c [rows, 1]. Everything is constexpr, so a
// graph can be generated inside constant evaluation from a compile-time seed and compiled by
// the CPU backend (test_cpu_random), or at run time from kt::rng() (test_random_graphs).
#pragma once

#include <kiln/kiln.hpp>

#include <cstdint>

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

template <class Rng>
struct random_graph {
  kiln::passes::builder b;
  Rng rng;
  kiln::cvec<int> pool;  // nodes that may be used as operands

  constexpr int coin(int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); }
  constexpr int pick() { return pool[static_cast<std::size_t>(coin(static_cast<int>(pool.size())))]; }

  constexpr int leaf(const char* name, kiln::dims shape, int slot) {
    kiln::node n = kiln::passes::builder::make(kiln::op::input, kiln::f64, shape);
    n.set_name(name);
    n.slot = slot;
    return b.emit(n);
  }
  constexpr int constant() {
    const double choices[] = {0.0, -0.0, 1.0, 2.0, 0.5, -3.0};
    return b.constant(choices[coin(6)], kiln::f64);
  }
  constexpr int positive(int x) { return b.add(b.unary(kiln::op::abs, x), b.constant(1, kiln::f64)); }

  /// One random op on operands from the pool.
  constexpr int step() {
    const int x = pick();
    switch (coin(16)) {
      case 0: {
        using kiln::op;
        const op u[] = {op::neg, op::abs, op::tanh, op::sigmoid, op::relu, op::gelu, op::gelu_tanh,
                        op::silu, op::sin, op::cos, op::erf};
        return b.unary(u[coin(11)], x);
      }
      case 1: return b.unary(kiln::op::exp, b.unary(kiln::op::tanh, x));
      case 2: {
        const kiln::op u[] = {kiln::op::log, kiln::op::sqrt, kiln::op::rsqrt, kiln::op::reciprocal};
        return b.unary(u[coin(4)], positive(x));
      }
      case 3:
      case 4: {
        const kiln::op o[] = {kiln::op::add, kiln::op::sub, kiln::op::mul, kiln::op::max, kiln::op::min};
        const int y = coin(4) == 0 ? constant() : pick();
        return coin(2) ? b.binary(o[coin(5)], x, y) : b.binary(o[coin(5)], y, x);
      }
      case 5: return b.div(x, positive(pick()));
      case 6: return b.where(b.binary(kiln::op::gt, x, pick()), x, pick());
      case 7: {  // a reduction that keeps the rank, so the result still broadcasts
        const kiln::op r[] = {kiln::op::sum, kiln::op::mean, kiln::op::amax, kiln::op::amin};
        const int rank = b.at(x).shape.rank;
        return b.reduce(r[coin(4)], x, 1u << coin(rank), true);
      }
      case 8: {
        const kiln::op o = coin(2) ? kiln::op::softmax : kiln::op::log_softmax;
        kiln::node n = kiln::passes::builder::make(o, kiln::f64, b.at(x).shape);
        n.in[0] = x;
        n.axis = coin(b.at(x).shape.rank);
        return b.emit(n);
      }
      case 9: {  // a repeated subexpression, operands swapped: CSE must merge it
        const int y = pick();
        b.add(x, y);
        return b.add(y, x);
      }
      case 10: {
        const int rank = b.at(x).shape.rank;
        kiln::node n = kiln::passes::builder::make(kiln::op::var, kiln::f64, b.at(x).shape);
        n.in[0] = x;
        n.axes = rank == 2 ? 2u : 1u;
        n.keepdim = true;
        n.value = 1;
        n.shape = kiln::reduce_shape(b.at(x).shape, n.axes, true).shape;
        return b.emit(n);
      }
      case 11: return b.unary(kiln::op::neg, b.unary(kiln::op::neg, x));
      case 12: return b.mul(x, b.constant(1, kiln::f64));
      case 13: {  // transpose twice (composes to the identity) through a reshape round trip
        const kiln::dims s = b.at(x).shape;
        return b.reshape(b.transpose(b.transpose(b.reshape(x, s))), s);
      }
      default: {
        const int y = pick();
        return b.add(b.mul(x, constant()), y);
      }
    }
  }
};

/// A random graph of 1 to 30 steps on leaves a, b, c (slots 0, 1, 2), with one output. With
/// dynamic_rows, a and c have a dynamic first extent (c's may then be 1 where a's is not).
template <class Rng>
constexpr kiln::graph make_random_graph(Rng rng, bool dynamic_rows = false) {
  random_graph<Rng> r{{}, rng, {}};
  const kiln::index_t cols = 1 + r.coin(6), rows = dynamic_rows ? kiln::dyn : 1 + r.coin(5);
  r.b.g.leaves = 3;
  r.pool = {r.leaf("a", kiln::dims{rows, cols}, 0), r.leaf("b", kiln::dims{1, cols}, 1),
            r.leaf("c", kiln::dims{rows, 1}, 2)};
  const int steps = 1 + r.coin(30);
  for (int s = 0; s < steps; ++s) r.pool.push_back(r.step());
  const int out = r.b.add(r.pool.back(), r.pool[r.pool.size() / 2]);
  r.b.g.outputs = {out};
  return r.b.g;
}

}  // namespace kt
