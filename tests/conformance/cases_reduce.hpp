// Conformance cases: reductions of graph/expr_derived.hpp (check_ops.py has their PyTorch
// counterparts, by case name), as a template over the float dtype: cases_reduce_f32.cpp and
// cases_reduce_f64.cpp instantiate it.
#pragma once

#include <kiln/graph/expr_derived.hpp>

#include "record.hpp"

namespace kc {

template <dtype D>
void reduction_cases_of(store& s, const std::string& sfx) {
  using A = input<"a", D, shape<4, 16>>;
  using E = input<"e", D, shape<4, 6>>;
  const any_tensor a = uniform(s, D, dims{4, 16}, -3, 3);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  // rows: all -inf; an inf; a NaN after the maximum; ties and zeros
  const any_tensor e = uniform(s, D, dims{4, 6}, -3, 3,
                               {-inf, -inf, -inf, -inf, -inf, -inf, 1, inf, 2, -inf, 0, 3, 5, -1, 7, nan, 7, 0,
                                2, 0, 2, -4, 0, -4});
  const std::vector<std::pair<std::string, any_tensor>> x{{"a", a}}, xe{{"e", e}};

  record<A>(s, std::string("logsumexp_1") + sfx, logsumexp<1>(A{}), x);
  record<A>(s, std::string("logsumexp_all") + sfx, logsumexp(A{}), x);
  record<A>(s, std::string("logsumexp_0_keep") + sfx, logsumexp<0>(A{}, keepdim), x);
  record<>(s, std::string("logsumexp_edges") + sfx, logsumexp<1>(E{}), xe);
  record<A>(s, std::string("std_1") + sfx, stddev<1>(A{}), x);
  record<A>(s, std::string("std_0_keep") + sfx, stddev<0>(A{}, keepdim), x);
  record<A>(s, std::string("std_all") + sfx, stddev(A{}), x);
  record<>(s, std::string("any_1") + sfx, any<1>(E{}), xe);
  record<>(s, std::string("all_1") + sfx, all<1>(E{}), xe);
  record<>(s, std::string("any_all") + sfx, any(E{}), xe);
  record<>(s, std::string("all_0_keep") + sfx, all<0>(E{}, keepdim), xe);
  record<>(s, std::string("argmax_1") + sfx, argmax<1>(A{}), x);
  record<>(s, std::string("argmin_0") + sfx, argmin<0>(A{}), x);
  record<>(s, std::string("argmax_edges") + sfx, argmax<1>(E{}), xe);
  record<>(s, std::string("argmin_edges") + sfx, argmin<1>(E{}), xe);
  record<>(s, std::string("argmax_keep") + sfx, argmax<-1>(A{}, keepdim), x);
  record<>(s, std::string("argmax_flat") + sfx, argmax(A{}), x);
  record<>(s, std::string("argmin_flat") + sfx, argmin(E{}), xe);
}

}  // namespace kc
