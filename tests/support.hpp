// Helpers shared by the tests: fresh random inputs (seed printed on failure) and comparisons.
#pragma once

#include <doctest/doctest.h>
#include <kiln/kiln.hpp>

#include "seed.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace kt {

template <class T, int R>
kiln::tensor<T, R> random(const std::array<kiln::index_t, R>& shape, double lo = -2, double hi = 2) {
  kiln::tensor<T, R> t(shape);
  std::uniform_real_distribution<double> u(lo, hi);
  T* p = t.data();
  for (kiln::index_t i = 0; i < t.numel(); ++i) {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) p[i] = static_cast<T>(std::floor(u(rng())));
    else if constexpr (std::is_same_v<T, bool>) p[i] = u(rng()) > 0.5 * (lo + hi);
    else p[i] = static_cast<T>(u(rng()));
  }
  return t;
}

/// A tensor of dtype dt with fresh values uniform in [lo, hi) (integers: the floor).
inline kiln::any_tensor random_tensor(kiln::dtype dt, const kiln::dims& s, double lo = -2, double hi = 2) {
  kiln::any_tensor f(kiln::dtype::f64, s), t(dt, s);
  std::uniform_real_distribution<double> u(lo, hi);
  double* p = reinterpret_cast<double*>(f.bytes());
  for (kiln::index_t i = 0; i < f.numel(); ++i) p[i] = kiln::is_floating(dt) ? u(rng()) : std::floor(u(rng()));
  t.copy_from(f);
  return t;
}

/// A tensor's values as doubles, row-major.
inline std::vector<double> values_of(const kiln::any_tensor& t) {
  kiln::any_tensor d(kiln::dtype::f64, t.shape());
  d.copy_from(t);
  const double* p = reinterpret_cast<const double*>(d.bytes());
  return std::vector<double>(p, p + d.numel());
}

/// |a - b| <= atol + rtol * |b|, with NaN equal to NaN.
inline bool close(double a, double b, double rtol = 1e-6, double atol = 1e-6) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= atol + rtol * std::fabs(b);
}

/// Largest difference between two tensors of one shape, each element |a - b| / (1 + |a|) for
/// floating dtypes (NaN must meet NaN, an infinity the same infinity: else +inf), and 0 or
/// +inf (any mismatch) for integers and bools.
inline double difference(const kiln::any_tensor& want, const kiln::any_tensor& got) {
  using namespace kiln;
  REQUIRE(want.dt() == got.dt());
  REQUIRE(want.shape() == got.shape());
  any_tensor a(f64, want.shape()), b(f64, got.shape());
  a.copy_from(want);
  b.copy_from(got);
  const bool exact = !is_floating(want.dt());
  double worst = 0;
  for (index_t i = 0; i < a.numel(); ++i) {
    const double p = a.data<double>()[i], q = b.data<double>()[i];
    if (std::isnan(p) || std::isnan(q)) {
      if (std::isnan(p) != std::isnan(q)) return INFINITY;
      continue;
    }
    if (std::isinf(p) || std::isinf(q)) {
      if (p != q) return INFINITY;
      continue;
    }
    if (exact) {
      if (p != q) return INFINITY;
      continue;
    }
    worst = std::max(worst, std::fabs(p - q) / (1 + std::fabs(p)));
  }
  return worst;
}

/// Whether two tensors hold the same bytes (1 thread against all threads).
inline bool same_bits(const kiln::any_tensor& a, const kiln::any_tensor& b) {
  if (!(a.shape() == b.shape()) || a.dt() != b.dt()) return false;
  const kiln::any_tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.bytes(), y.bytes(), static_cast<std::size_t>(x.numel()) * kiln::size_of(x.dt())) == 0;
}

/// Calls f(idx) for each multi-index of a typed tensor's shape.
template <class T, int R, class F>
void each(const kiln::tensor<T, R>& t, F&& f) {
  kiln::for_each_index(t.any().shape(), [&](const kiln::index_t* idx) { f(idx); });
}

/// Element of t at a multi-index array.
template <class T, int R>
T& at(const kiln::tensor<T, R>& t, const kiln::index_t* idx) {
  return t.data()[t.any().offset_of(idx)];
}

/// Empties kiln's storage cache and sets its limit for one scope; empties it again and puts
/// the old limit back at the end, whatever happened in between.
struct storage_cache_scope {
  std::size_t old;
  explicit storage_cache_scope(std::size_t limit) : old(kiln::set_storage_cache_limit(0)) {
    kiln::set_storage_cache_limit(limit);
  }
  storage_cache_scope(const storage_cache_scope&) = delete;
  storage_cache_scope& operator=(const storage_cache_scope&) = delete;
  ~storage_cache_scope() {
    kiln::release_cached_storage();
    kiln::set_storage_cache_limit(old);
  }
};

}  // namespace kt
