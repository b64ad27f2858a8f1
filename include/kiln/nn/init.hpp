// kiln/nn/init.hpp: parameter initialisers, reproducible by seed (torch.nn.init's rules).
//
// Each fills a contiguous floating-point tensor from the counter-based generator philox(seed,
// stream): the values depend on (seed, stream) only. Modules pass stream_of(parameter name), so
// a parameter's initial value does not change when other parameters are added.
//
//   nn::init::kaiming_uniform(w, /*fan_in=*/784, seed, nn::stream_of("fc1.weight"));
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "../core/tensor.hpp"
#include "random.hpp"

namespace kiln::nn::init {

namespace detail {
/// Writes f(i) (a double) to element i of t, converted to t's dtype.
template <class F>
void fill_with(any_tensor& t, const char* who, F f) {
  if (!t.defined()) throw std::invalid_argument(std::string("kiln: nn::init::") + who + ": the tensor is undefined");
  if (!is_floating(t.dt()))
    throw std::invalid_argument(std::string("kiln: nn::init::") + who + ": needs a floating-point tensor, not " +
                                std::string(name(t.dt())));
  if (!t.is_contiguous()) throw std::invalid_argument(std::string("kiln: nn::init::") + who + ": needs a contiguous tensor");
  const index_t n = t.numel();
  visit(t.dt(), [&]<dtype D>() {
    if constexpr (is_floating(D)) {
      auto* p = reinterpret_cast<storage_t<D>*>(t.bytes());
      for (index_t i = 0; i < n; ++i) p[i] = storage_t<D>(static_cast<compute_t<D>>(f(static_cast<std::uint64_t>(i))));
    }
  });
}
inline void check_fan(index_t fan, const char* who) {
  if (fan <= 0) throw std::invalid_argument(std::string("kiln: nn::init::") + who + ": fan must be positive, not " + std::to_string(fan));
}
}  // namespace detail

/// Every element 0.
inline void zeros(any_tensor& t) {
  detail::fill_with(t, "zeros", [](std::uint64_t) { return 0.0; });
}
/// Every element v.
inline void constant(any_tensor& t, double v) {
  detail::fill_with(t, "constant", [v](std::uint64_t) { return v; });
}
/// Uniform in [lo, hi).
inline void uniform(any_tensor& t, double lo, double hi, std::uint64_t seed, std::uint64_t stream = 0) {
  const philox r(seed, stream);
  detail::fill_with(t, "uniform", [&](std::uint64_t i) { return lo + (hi - lo) * r.uniform(i); });
}
/// Normal with this mean and standard deviation.
inline void normal(any_tensor& t, double mean, double stddev, std::uint64_t seed, std::uint64_t stream = 0) {
  const philox r(seed, stream);
  detail::fill_with(t, "normal", [&](std::uint64_t i) { return mean + stddev * r.normal(i); });
}
/// He et al.: uniform with bound gain * sqrt(3 / fan_in); gain sqrt(2) suits relu. PyTorch's
/// nn.Linear default (kaiming_uniform with a = sqrt(5)) is gain sqrt(1/3): bound 1/sqrt(fan_in).
inline void kaiming_uniform(any_tensor& t, index_t fan_in, std::uint64_t seed, std::uint64_t stream = 0,
                            double gain = std::sqrt(2.0)) {
  detail::check_fan(fan_in, "kaiming_uniform");
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_in));
  uniform(t, -bound, bound, seed, stream);
}
/// He et al.: normal with standard deviation gain / sqrt(fan_in).
inline void kaiming_normal(any_tensor& t, index_t fan_in, std::uint64_t seed, std::uint64_t stream = 0,
                           double gain = std::sqrt(2.0)) {
  detail::check_fan(fan_in, "kaiming_normal");
  normal(t, 0.0, gain / std::sqrt(static_cast<double>(fan_in)), seed, stream);
}
/// Glorot and Bengio: uniform with bound gain * sqrt(6 / (fan_in + fan_out)).
inline void xavier_uniform(any_tensor& t, index_t fan_in, index_t fan_out, std::uint64_t seed, std::uint64_t stream = 0,
                           double gain = 1.0) {
  detail::check_fan(fan_in + fan_out, "xavier_uniform");
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  uniform(t, -bound, bound, seed, stream);
}
/// Glorot and Bengio: normal with standard deviation gain * sqrt(2 / (fan_in + fan_out)).
inline void xavier_normal(any_tensor& t, index_t fan_in, index_t fan_out, std::uint64_t seed, std::uint64_t stream = 0,
                          double gain = 1.0) {
  detail::check_fan(fan_in + fan_out, "xavier_normal");
  normal(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), seed, stream);
}

}  // namespace kiln::nn::init
