// Conformance cases: kiln's own pointwise ops (the README's unary, binary and select rows;
// check_ops.py has their PyTorch counterparts, by case name), as a template over the float
// dtype: cases_core_f32.cpp and cases_core_f64.cpp instantiate it.
#pragma once

#include "record.hpp"

namespace kc {

template <dtype D>
void core_cases_of(store& s, const std::string& sfx) {
  using A = input<"a", D, shape<64>>;
  using B = input<"b", D, shape<64>>;
  using P = input<"p", D, shape<16>>;
  using Q = input<"q", D, shape<16>>;
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const any_tensor a = uniform(s, D, dims{64}, -3, 3, float_edges());
  // b: ties with a (max, min), zeros (div), integers and halves (pow)
  const any_tensor b = uniform(s, D, dims{64}, -2, 2, {0.0, 1.0, 1e-7, 2.0, 0.5, -1.0, 3.0, 0.0, 2.0, -2.0, 20.0, 3.0});
  // pow's special values, pairwise: C's pow(3)
  const any_tensor p = uniform(s, D, dims{16}, 0, 1, {0.0, -0.0, inf, nan, 1.0, 0.0, 0.0, -0.0, -8.0, -inf, 2.0, 0.5, 1.0, -1.0, 1e30, 1e-30});
  const any_tensor q = uniform(s, D, dims{16}, 0, 1, {0.0, 0.0, 0.0, 0.0, nan, -1.0, 0.5, -1.0, 1.0 / 3, 3.0, 1e30, -inf, inf, inf, 2.0, 0.5});
  const std::vector<std::pair<std::string, any_tensor>> x{{"a", a}}, xy{{"a", a}, {"b", b}};

  record<A>(s, std::string("exp") + sfx, exp(A{}), x);
  record<A>(s, std::string("log") + sfx, log(A{}), x);
  record<A>(s, std::string("sqrt") + sfx, sqrt(A{}), x);
  record<A>(s, std::string("rsqrt") + sfx, rsqrt(A{}), x);
  record<A>(s, std::string("reciprocal") + sfx, reciprocal(A{}), x);
  record<A>(s, std::string("tanh") + sfx, tanh(A{}), x);
  record<A>(s, std::string("sigmoid") + sfx, sigmoid(A{}), x);
  record<A>(s, std::string("relu") + sfx, relu(A{}), x);
  record<A>(s, std::string("gelu") + sfx, gelu(A{}), x);
  record<A>(s, std::string("gelu_tanh") + sfx, gelu_tanh(A{}), x);
  record<A>(s, std::string("silu") + sfx, silu(A{}), x);
  record<A>(s, std::string("softplus") + sfx, softplus(A{}), x);
  record<A>(s, std::string("sin") + sfx, sin(A{}), x);
  record<A>(s, std::string("cos") + sfx, cos(A{}), x);
  record<A>(s, std::string("erf") + sfx, erf(A{}), x);
  record<A>(s, std::string("abs") + sfx, abs(A{}), x);
  record<A>(s, std::string("neg") + sfx, -A{}, x);
  record<A, B>(s, std::string("add") + sfx, A{} + B{} * 2.5, xy);
  record<A, B>(s, std::string("sub") + sfx, A{} - B{}, xy);
  record<A, B>(s, std::string("mul") + sfx, A{} * B{}, xy);
  record<A, B>(s, std::string("div") + sfx, A{} / B{}, xy);
  record<A, B>(s, std::string("pow") + sfx, pow(A{}, B{}), xy);
  record<P, Q>(s, std::string("pow_special") + sfx, pow(P{}, Q{}), {{"p", p}, {"q", q}});
  record<A, B>(s, std::string("maximum") + sfx, max(A{}, B{}), xy);
  record<A, B>(s, std::string("minimum") + sfx, min(A{}, B{}), xy);
  record<A, B>(s, std::string("where") + sfx, where(A{} > B{}, A{}, B{} * 3), xy);
  record<>(s, std::string("compare") + sfx, le(A{}, B{}), xy);
}

}  // namespace kc
