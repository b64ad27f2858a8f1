// Helpers for the CPU backend's tests: run an expression's plan with the CPU backend and its
// captured graph with the eager reference on the same (fresh random) inputs, and compare.
#pragma once

#include "support.hpp"

#include <kiln/backend/cpu.hpp>

#include <cstring>
#include <span>
#include <vector>

namespace kt {

/// The leaf table of e from those of `feeds` that name one of its placeholders (tests pass one
/// set of inputs to several expressions).
template <class E>
std::vector<kiln::any_tensor> leaves_of(const E& e, std::initializer_list<kiln::feed> feeds) {
  using namespace kiln;
  std::vector<feed> used;
  for (const feed& f : feeds)
    for (const node& n : traced<E>::value.nodes)
      if ((n.o == op::input || n.o == op::param) && n.label() == f.name) {
        used.push_back(f);
        break;
      }
  return bind_leaves(traced<E>::value, e, std::span<const feed>(used.data(), used.size()));
}

/// Runs e with the CPU backend and with the eager reference; returns the largest difference
/// over all outputs. Also checks that the CPU result does not depend on the thread count.
template <class E>
double cpu_vs_eager(const E& e, std::initializer_list<kiln::feed> feeds = {}) {
  using namespace kiln;
  constexpr const auto& s = plan<E>::schedule;
  const std::vector<any_tensor> leaves = leaves_of(e, feeds);
  const std::vector<any_tensor> want = eager::run(eager_graph<E>(), leaves);
  const std::vector<any_tensor> got = cpu::run_schedule<s>(leaves);
  REQUIRE(want.size() == got.size());
  double worst = 0;
  for (std::size_t q = 0; q < got.size(); ++q) {
    for (const any_tensor& l : leaves) REQUIRE_FALSE(got[q].shares_storage(l));
    worst = std::max(worst, difference(want[q], got[q]));
  }
  const int threads = cpu::set_num_threads(1);
  const std::vector<any_tensor> one = cpu::run_schedule<s>(leaves);
  cpu::set_num_threads(3);
  const std::vector<any_tensor> three = cpu::run_schedule<s>(leaves);
  cpu::set_num_threads(threads);
  for (std::size_t q = 0; q < got.size(); ++q) {
    CHECK(same_bits(one[q], got[q]));
    CHECK(same_bits(three[q], got[q]));
  }
  return worst;
}

/// A random tensor of any rank and element type on [lo, hi) (integers: floor of that).
template <class T, int R>
kiln::tensor<T, R> rand(const std::array<kiln::index_t, R>& shape, double lo = -2, double hi = 2) {
  if constexpr (std::is_same_v<T, kiln::bfloat16>) {
    kiln::tensor<float, R> f = random<float, R>(shape, lo, hi);
    kiln::tensor<T, R> t(shape);
    for (kiln::index_t i = 0; i < t.numel(); ++i) t.data()[i] = kiln::bfloat16(f.data()[i]);
    return t;
  } else {
    return random<T, R>(shape, lo, hi);
  }
}

/// Sizes that are not multiples of any vector width (tails), for pointwise tests.
inline constexpr kiln::index_t sizes[] = {1, 7, 17, 1023, 40000};

/// Tolerance of a pointwise result against the eager reference, by dtype.
template <class T>
constexpr double tol() {
  if constexpr (std::is_same_v<T, double>) return 1e-13;
  else if constexpr (std::is_same_v<T, kiln::bfloat16>) return 1e-2;  // one bf16 rounding step apart
  else return 1e-5;
}

/// Runs a unary expression builder on a rank-1 dyn-extent input of every size.
template <class T, class Build>
void unary_sizes(Build build, double lo, double hi) {
  using X = kiln::input<"x", kiln::dtype_of<T>, kiln::shape<kiln::dyn>>;
  for (kiln::index_t n : sizes) {
    INFO("n = " << n);
    CHECK(cpu_vs_eager(build(X{}), {{"x", rand<T, 1>({n}, lo, hi)}}) <= tol<T>());
  }
}

}  // namespace kt
