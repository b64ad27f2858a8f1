// A plain-loop reference for scaled-dot-product attention in double (tests/test_attention*.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "support.hpp"

namespace kt {

using kiln::index_t;

/// Extents of one attention problem: q [b, h, tq, d], k [b, hk, tk, d], v [b, hk, tk, dv].
struct problem {
  index_t b, h, hk, tq, tk, d, dv;
};

/// softmax(q k^T * scale + mask) v by loops in double; `keep(b, h, i, j)` says whether key j is
/// attended to by query i, `add(b, h, i, j)` what is added to its score.
template <class Keep, class Add>
std::vector<double> attention_by_loops(const problem& p, const std::vector<double>& q, const std::vector<double>& k,
                                       const std::vector<double>& v, double scale, Keep keep, Add add) {
  std::vector<double> out(static_cast<std::size_t>(p.b * p.h * p.tq * p.dv), 0.0);
  std::vector<double> s(static_cast<std::size_t>(p.tk));
  const index_t group = p.h / p.hk;
  for (index_t b = 0; b < p.b; ++b)
    for (index_t h = 0; h < p.h; ++h) {
      const index_t kh = h / group;  // the k/v head serving q head h
      for (index_t i = 0; i < p.tq; ++i) {
        double m = -std::numeric_limits<double>::infinity();
        for (index_t j = 0; j < p.tk; ++j) {
          double dot = 0;
          for (index_t c = 0; c < p.d; ++c)
            dot += q[static_cast<std::size_t>(((b * p.h + h) * p.tq + i) * p.d + c)] *
                   k[static_cast<std::size_t>(((b * p.hk + kh) * p.tk + j) * p.d + c)];
          s[static_cast<std::size_t>(j)] =
              keep(b, h, i, j) ? dot * scale + add(b, h, i, j) : -std::numeric_limits<double>::infinity();
          m = std::max(m, s[static_cast<std::size_t>(j)]);
        }
        double z = 0;
        for (double& x : s) z += (x = std::exp(x - m));
        for (index_t c = 0; c < p.dv; ++c) {
          double acc = 0;
          for (index_t j = 0; j < p.tk; ++j)
            acc += s[static_cast<std::size_t>(j)] * v[static_cast<std::size_t>(((b * p.hk + kh) * p.tk + j) * p.dv + c)];
          out[static_cast<std::size_t>(((b * p.h + h) * p.tq + i) * p.dv + c)] = acc / z;
        }
      }
    }
  return out;
}


constexpr auto all_keys = [](index_t, index_t, index_t, index_t) { return true; };
constexpr auto nothing_added = [](index_t, index_t, index_t, index_t) { return 0.0; };

inline void check_values(const kiln::any_tensor& got, const std::vector<double>& want, double tol) {
  const std::vector<double> g = values_of(got);
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    CAPTURE(i);
    CHECK(close(g[i], want[i], tol, tol));
  }
}

}  // namespace kt
