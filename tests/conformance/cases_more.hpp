// Conformance cases: the rounding and inverse trigonometric primitives, fmod and atan2, the
// remainders, creation (eye, linspace, full) and tiling, padding and splitting (check_ops.py
// has their PyTorch counterparts, by case name); cases_more_f32.cpp and cases_more_f64.cpp
// instantiate it.
#pragma once

#include <kiln/graph/expr_derived.hpp>

#include "record.hpp"

namespace kc {

template <dtype D>
void more_cases_of(store& s, const std::string& sfx) {
  using A = input<"a", D, shape<64>>;
  using B = input<"b", D, shape<64>>;
  using C = input<"c", D, shape<64>>;
  using I = input<"i", kiln::i64, shape<64>>;
  using P = input<"p", D, shape<2, 3>>;
  using Q = input<"q", D, shape<5, 7>>;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> edges = float_edges();
  // ties of round (half to even), values just off them, and integers
  edges.insert(edges.end(), {1.5, 2.5, -1.5, -2.5, 3.5, 0.49999997, -0.49999997, 2.0, -3.0, 1e7 + 0.5});
  const any_tensor a = uniform(s, D, dims{64}, -6, 6, edges);
  // divisors: zeros, infinities, NaN, a negative, one that divides a's integers
  const any_tensor b = uniform(s, D, dims{64}, -2.5, 2.5,
                               {1.0, -1.0, 0.0, -0.0, 2.0, 3.0, inf, -inf, std::numeric_limits<double>::quiet_NaN(),
                                1.0, 0.5, -0.5, 0.0, 0.3, -0.3, 1e-30, 1e30, -2.0});
  // the domain of asin and acos and a little beyond, with its ends
  const any_tensor c = uniform(s, D, dims{64}, -1.05, 1.05,
                               {1.0, -1.0, 0.0, -0.0, 0.5, -0.5, 1.0000001, -1.0000001, 0.9999999, 2.0, inf,
                                std::numeric_limits<double>::quiet_NaN(), 1e-30});
  const any_tensor i = uniform(s, kiln::i64, dims{64}, -9, 9);
  const any_tensor p = uniform(s, D, dims{2, 3}, -2, 2);
  const any_tensor q = uniform(s, D, dims{5, 7}, -2, 2);
  const std::vector<std::pair<std::string, any_tensor>> xa{{"a", a}}, xab{{"a", a}, {"b", b}}, xc{{"c", c}},
      xp{{"p", p}}, xq{{"q", q}};

  record<A>(s, std::string("floor") + sfx, floor(A{}), xa);
  record<A>(s, std::string("ceil") + sfx, ceil(A{}), xa);
  record<A>(s, std::string("round") + sfx, round(A{}), xa);
  record<A>(s, std::string("trunc") + sfx, trunc(A{}), xa);
  record<>(s, std::string("round_int") + sfx, round(I{}) + floor(I{}), {{"i", i}});
  record<A>(s, std::string("atan") + sfx, atan(A{}), xa);
  record<C>(s, std::string("asin") + sfx, asin(C{}), xc);
  record<C>(s, std::string("acos") + sfx, acos(C{}), xc);
  record<A, B>(s, std::string("atan2") + sfx, atan2(A{}, B{}), xab);
  record<A, B>(s, std::string("fmod") + sfx, fmod(A{}, B{}), xab);
  record<A>(s, std::string("fmod_scalar") + sfx, fmod(A{}, -1.5), xa);
  // exact where a - trunc(a / b) b is not: 0.1 is inexact, and 1e7 / 0.1 has no spare bits
  record<>(s, std::string("fmod_inexact") + sfx, fmod(A{}, 0.1), xa);
  record<A, B>(s, std::string("remainder") + sfx, remainder(A{}, B{}), xab);
  record<A>(s, std::string("remainder_scalar") + sfx, remainder(A{}, 1.5), xa);
  record<>(s, std::string("floor_divide") + sfx, floor_divide(A{}, B{}), xab);
  record<>(s, std::string("floor_divide_scalar") + sfx, floor_divide(A{}, -0.7), xa);
  record<A>(s, std::string("sigmoid_tail") + sfx, sigmoid(A{} * 4.0) + silu(A{} * 4.0), xa);

  record<>(s, std::string("eye") + sfx, cast<D>(eye<3, 5>()), {});
  record<>(s, std::string("linspace") + sfx, linspace<7, D>(-2.5, 4.0), {});
  record<>(s, std::string("linspace_one") + sfx, linspace<1, D>(3.0, 9.0), {});
  record<>(s, std::string("full") + sfx, full<2, 3>(1.25) + zeros<2, 3>() * ones<3>(), {});

  record<P>(s, std::string("tile") + sfx, tile<2, 1, 3>(P{}), xp);
  record<P>(s, std::string("tile_short") + sfx, tile<2>(P{}), xp);
  record<P>(s, std::string("repeat") + sfx, repeat<2, 2>(P{}), xp);
  record<P>(s, std::string("pad") + sfx, pad<1, 2>(P{}, 0.5), xp);
  record<P>(s, std::string("pad_two") + sfx, pad<1, 0, 2, 1>(P{}), xp);
  record<P>(s, std::string("pad_after") + sfx, pad<0, 3>(P{}, -2.0), xp);
  {
    const auto [c0, c1, c2] = chunk<3, 1>(Q{});  // pieces of 3, 3 and 1
    record<Q>(s, std::string("chunk") + sfx, concat<1>(c2, c0 * 2.0, c1), xq);
  }
  {
    const auto [s0, s1, s2] = split<2, 0>(Q{});  // pieces of 2, 2 and 1
    record<Q>(s, std::string("split") + sfx, concat<0>(s2, s1, s0 * s0), xq);
  }
  {
    const auto [u0, u1, u2] = unbind<1>(P{});
    record<P>(s, std::string("unbind") + sfx, u0 * u1 - u2, xp);
  }
}

}  // namespace kc
