// Expressions shared by the two translation units of test_ids (test_ids.cpp, test_ids_other.cpp).
#pragma once

#include <kiln/kiln.hpp>

#include <string>

namespace ids {

using X = kiln::input<"x", kiln::f32, kiln::shape<kiln::dyn, 8>>;
using Y = kiln::input<"y", kiln::f32, kiln::shape<kiln::dyn, 8>>;

/// n steps of e -> tanh(e * y), built by recursion in chunks (the type of every step is an id,
/// so the depth of the expression does not show in it). Placeholders carry no data: a deep
/// chain of them stays small at run time (C++ scalars would be copied into every step).
template <int N, class E>
constexpr auto steps(const E& e) {
  if constexpr (N == 0) return e;
  else return steps<N - 1>(kiln::tanh(e * Y{}));
}

/// A 600-step chain: 1202 nodes once traced, deeper than any recursion limit of the compilers.
inline constexpr int deep_steps = 600;
inline auto deep() { return steps<100>(steps<100>(steps<100>(steps<100>(steps<100>(steps<100>(X{})))))); }
using Deep = decltype(deep());

/// Defined in test_ids_other.cpp: Deep's type name there, Deep evaluated there (with the eager
/// backend), and the size of its plan there.
std::string deep_type_name_elsewhere();
kiln::any_tensor eval_deep_elsewhere(const kiln::any_tensor& x, const kiln::any_tensor& y);
std::size_t deep_plan_nodes_elsewhere();

}  // namespace ids
