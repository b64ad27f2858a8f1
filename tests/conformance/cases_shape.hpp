// Conformance cases: shape ops, products, losses and norms of graph/expr_derived.hpp (check_ops.py has their PyTorch
// counterparts, by case name), as a template over the float dtype: cases_shape_f32.cpp and
// cases_shape_f64.cpp instantiate it.
#pragma once

#include <kiln/graph/expr_derived.hpp>

#include "record.hpp"

namespace kc {

template <dtype D>
void shape_cases_of(store& s, const std::string& sfx) {
  using A = input<"a", D, shape<4, 16>>;
  using B = input<"b", D, shape<4, 16>>;
  using C1 = input<"c", D, shape<4, 1, 16>>;
  using U = input<"u", D, shape<5>>;
  using V = input<"v", D, shape<7>>;
  using P = input<"p", D, shape<2, 3, 4>>;
  using Q = input<"q", D, shape<2, 4, 5>>;
  using P2 = input<"p", D, shape<3, 4>>;
  using Q2 = input<"q", D, shape<4, 5>>;
  using C2 = input<"c", D, shape<3, 5>>;
  using T3 = input<"t", D, shape<2, 4, 5>>;
  using Ix = input<"i", kiln::i64, shape<6>>;
  using L = input<"l", D, shape<8, 5>>;
  using Y = input<"y", kiln::i64, shape<8>>;
  using W = input<"w", D, shape<16>>;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const any_tensor a = uniform(s, D, dims{4, 16}, -3, 3), b = uniform(s, D, dims{4, 16}, -3, 3);
  const any_tensor c1 = uniform(s, D, dims{4, 1, 16}, -3, 3);
  const any_tensor u = uniform(s, D, dims{5}, -2, 2), v = uniform(s, D, dims{7}, -2, 2);
  const any_tensor p = uniform(s, D, dims{2, 3, 4}, -2, 2), q = uniform(s, D, dims{2, 4, 5}, -2, 2);
  const any_tensor p2 = uniform(s, D, dims{3, 4}, -2, 2), q2 = uniform(s, D, dims{4, 5}, -2, 2);
  const any_tensor c2 = uniform(s, D, dims{3, 5}, -2, 2, {nan});
  const any_tensor t3 = uniform(s, D, dims{2, 4, 5}, -2, 2);
  const any_tensor ix = uniform(s, kiln::i64, dims{6}, 0, 16, {15, 0, 3, 3, 7, 15});
  const any_tensor l = uniform(s, D, dims{8, 5}, -3, 0);
  const any_tensor y = uniform(s, kiln::i64, dims{8}, 0, 5, {4, 0, -100, 2});
  const any_tensor w = uniform(s, D, dims{16}, 0.5, 1.5);

  record<A>(s, std::string("unsqueeze_1") + sfx, unsqueeze<1>(A{}), {{"a", a}});
  record<A>(s, std::string("unsqueeze_last") + sfx, unsqueeze<-1>(A{}), {{"a", a}});
  record<C1>(s, std::string("squeeze_1") + sfx, squeeze<1>(C1{}), {{"c", c1}});
  record<A>(s, std::string("squeeze_noop") + sfx, squeeze<0>(A{}), {{"a", a}});
  record<A, B>(s, std::string("stack_1") + sfx, stack<1>(A{}, B{}), {{"a", a}, {"b", b}});
  record<A, B>(s, std::string("stack_0") + sfx, stack<0>(A{}, B{}, A{}), {{"a", a}, {"b", b}});
  record<U, V>(s, std::string("outer") + sfx, outer(U{}, V{}), {{"u", u}, {"v", v}});
  record<P, Q>(s, std::string("bmm") + sfx, bmm(P{}, Q{}), {{"p", p}, {"q", q}});
  record<C2, P2, Q2>(s, std::string("addmm") + sfx, addmm(C2{}, P2{}, Q2{}, 0.5, 2.0), {{"c", c2}, {"p", p2}, {"q", q2}});
  record<P2, Q2>(s, std::string("addmm_beta0") + sfx, addmm(C2{}, P2{}, Q2{}, 0.0, 1.5), {{"c", c2}, {"p", p2}, {"q", q2}});
  record<A>(s, std::string("triu_1") + sfx, triu<1>(A{}), {{"a", a}});
  record<A>(s, std::string("tril_m1") + sfx, tril<-1>(A{}), {{"a", a}});
  record<T3>(s, std::string("triu_batched") + sfx, triu<0>(T3{}), {{"t", t3}});
  record<A>(s, std::string("roll_3_1") + sfx, roll<3, 1>(A{}), {{"a", a}});
  record<A>(s, std::string("roll_m5_0") + sfx, roll<-5, 0>(A{}), {{"a", a}});
  record<A>(s, std::string("flip_1") + sfx, flip<1>(A{}), {{"a", a}});
  record<T3>(s, std::string("flip_0") + sfx, flip<0>(T3{}), {{"t", t3}});
  record<A>(s, std::string("index_select_1") + sfx, index_select<1>(A{}, Ix{}), {{"a", a}, {"i", ix}});
  record<L>(s, std::string("nll_loss") + sfx, nll_loss(L{}, Y{}), {{"l", l}, {"y", y}});
  record<A, W>(s, std::string("rms_norm") + sfx, rms_norm(A{}, W{}), {{"a", a}, {"w", w}});
  record<>(s, std::string("arange") + sfx, arange<7>(), {});
  record<>(s, std::string("zeros_like") + sfx, zeros_like(A{}), {{"a", a}});
  record<>(s, std::string("full_like") + sfx, full_like(A{}, 2.5), {{"a", a}});
  record<>(s, std::string("ones_like") + sfx, ones_like(A{}), {{"a", a}});
  record<>(s, std::string("arange_like") + sfx, arange_like<1>(A{}), {{"a", a}});
}

}  // namespace kc
