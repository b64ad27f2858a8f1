// Conformance cases: running products and products (cumprod, prod), zeros included, where
// their gradients need PyTorch's rule (check_ops.py has the PyTorch counterparts, by case name);
// cases_scan_f32.cpp and cases_scan_f64.cpp instantiate it.
#pragma once

#include "record.hpp"

namespace kc {

template <dtype D>
void scan_cases_of(store& s, const std::string& sfx) {
  using S = input<"s", D, shape<5, 6>>;
  using I = input<"i", kiln::i64, shape<4, 6>>;
  using M = input<"m", kiln::boolean, shape<7>>;
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  // values near 1 in magnitude: products of 6 stay in range
  const any_tensor sv = uniform(s, D, dims{5, 6}, -1.5, 1.5);
  // rows with no zero, one zero (first, inside, last) and two; -0, an infinity and NaN
  const any_tensor zeros = uniform(s, D, dims{5, 6}, -1.5, 1.5,
                                   {0.0, 1.1, -0.7, 1.3, 0.9, -1.2,  1.2, 0.8, 0.0, -1.4, 0.6, 1.5,
                                    0.9, -1.1, 1.3, 0.7, -0.8, 0.0,  1.4, 0.0, -0.9, 0.0, 1.2, 0.8,
                                    -0.0, 1.3, inf, 0.6, nan, 0.5});
  const any_tensor iv = uniform(s, kiln::i64, dims{4, 6}, -4, 4);
  const any_tensor mv = uniform(s, kiln::boolean, dims{7}, 0, 1);
  const std::vector<std::pair<std::string, any_tensor>> xs{{"s", sv}}, xz{{"s", zeros}};

  record<S>(s, std::string("cumprod") + sfx, cumprod<1>(S{}), xs);
  record<S>(s, std::string("cumprod_0") + sfx, cumprod<0>(S{}), xs);
  record<>(s, std::string("cumprod_int") + sfx, cumprod<1>(I{}), {{"i", iv}});
  record<>(s, std::string("cumprod_bool") + sfx, cumprod<0>(M{}), {{"m", mv}});
  record<S>(s, std::string("prod_1") + sfx, prod<1>(S{}), xs);
  record<S>(s, std::string("prod_0_keep") + sfx, prod<0>(S{}, keepdim), xs);
  record<S>(s, std::string("prod_all") + sfx, prod(S{}), xs);
  record<>(s, std::string("prod_int") + sfx, prod<0>(I{}), {{"i", iv}});
  // the gradients with zeros (values only where an infinity or NaN meets a zero: 0 * inf)
  record<S>(s, std::string("cumprod_zeros") + sfx, cumprod<1>(slice<0, 0, 4>(S{})), xz);
  record<S>(s, std::string("prod_zeros") + sfx, prod<1>(slice<0, 0, 4>(S{})), xz);
  record<>(s, std::string("cumprod_edges") + sfx, cumprod<1>(S{}), xz);
}

}  // namespace kc
