// Conformance cases: pointwise ops of graph/expr_derived.hpp (check_ops.py has their PyTorch
// counterparts, by case name), as a template over the float dtype: cases_pointwise_f32.cpp and
// cases_pointwise_f64.cpp instantiate it.
#pragma once

#include <kiln/graph/expr_derived.hpp>

#include "record.hpp"

namespace kc {

template <dtype D>
void pointwise_cases_of(store& s, const std::string& sfx) {
  using A = input<"a", D, shape<64>>;
  using B = input<"b", D, shape<64>>;
  using M = input<"m", kiln::boolean, shape<64>>;
  using N = input<"n", kiln::boolean, shape<64>>;
  using I = input<"i", kiln::i64, shape<64>>;
  // random values in [-3, 3] after the edges, and the clamp bounds' own values
  std::vector<double> edges = float_edges();
  edges.insert(edges.end(), {1.5, 0.2, 0.3, 6.0, -2.0, 1e-4, -1e-4, 3e-3});
  const any_tensor a = uniform(s, D, dims{64}, -3, 3, edges);
  const any_tensor b = uniform(s, D, dims{64}, -2, 2, {0.0, 1.0, -0.0, 0.0});
  const any_tensor m = uniform(s, kiln::boolean, dims{64}, 0, 1);
  const any_tensor n = uniform(s, kiln::boolean, dims{64}, 0, 1);
  const any_tensor i = uniform(s, kiln::i64, dims{64}, -5, 5);
  const std::vector<std::pair<std::string, any_tensor>> x{{"a", a}};

  record<A>(s, std::string("expm1") + sfx, expm1(A{}), x);
  record<A>(s, std::string("log1p") + sfx, log1p(A{}), x);
  record<A>(s, std::string("log2") + sfx, log2(A{}), x);
  record<A>(s, std::string("log10") + sfx, log10(A{}), x);
  record<A>(s, std::string("exp2") + sfx, exp2(A{}), x);
  record<A>(s, std::string("tan") + sfx, tan(A{}), x);
  record<A>(s, std::string("sinh") + sfx, sinh(A{}), x);
  record<A>(s, std::string("cosh") + sfx, cosh(A{}), x);
  record<A>(s, std::string("square") + sfx, square(A{}), x);
  record<A>(s, std::string("sign") + sfx, sign(A{}), x);
  record<A>(s, std::string("clamp") + sfx, clamp(A{}, -0.5, 1.5), x);
  record<A>(s, std::string("clamp_crossed") + sfx, clamp(A{}, 1.0, 0.0), x);
  record<A>(s, std::string("clamp_min") + sfx, clamp_min(A{}, 0.2), x);
  record<A>(s, std::string("clamp_max") + sfx, clamp_max(A{}, 0.3), x);
  record<A>(s, std::string("hardtanh") + sfx, hardtanh(A{}), x);
  record<A>(s, std::string("relu6") + sfx, relu6(A{}), x);
  record<A>(s, std::string("leaky_relu") + sfx, leaky_relu(A{}, 0.1), x);
  record<A>(s, std::string("elu") + sfx, elu(A{}, 1.5), x);
  record<A>(s, std::string("mish") + sfx, mish(A{}), x);
  record<A, B>(s, std::string("masked_fill") + sfx, masked_fill(A{}, M{}, 2.5) * B{}, {{"a", a}, {"m", m}, {"b", b}});
  record<>(s, std::string("isnan") + sfx, isnan(A{}), x);
  record<>(s, std::string("isinf") + sfx, isinf(A{}), x);
  record<>(s, std::string("isfinite") + sfx, isfinite(A{}), x);
  record<>(s, std::string("nan_to_num") + sfx, nan_to_num(A{}), x);
  record<>(s, std::string("nan_to_num_given") + sfx, nan_to_num(A{}, 1.0, 2.0, -3.0), x);
  record<>(s, std::string("logical_not") + sfx, logical_not(B{}), {{"b", b}});
  record<>(s, std::string("logical_and") + sfx, logical_and(A{}, B{}), {{"a", a}, {"b", b}});
  record<>(s, std::string("logical_or") + sfx, logical_or(A{}, B{}), {{"a", a}, {"b", b}});
  record<>(s, std::string("logical_xor") + sfx, logical_xor(A{}, B{}), {{"a", a}, {"b", b}});
  record<>(s, std::string("clamp_int") + sfx, clamp(I{}, -2, 3), {{"i", i}});
  record<>(s, std::string("sign_int") + sfx, sign(I{}), {{"i", i}});
  // bool + bool and bool * bool: logical or and and, as PyTorch's
  record<>(s, std::string("add_bool") + sfx, M{} + N{}, {{"m", m}, {"n", n}});
  record<>(s, std::string("mul_bool") + sfx, M{} * N{}, {{"m", m}, {"n", n}});
}

}  // namespace kc
