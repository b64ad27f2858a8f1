// Derivatives computed in f32 and bf16, and through casts, against central differences of the
// same expression in f64 (tests/gradcheck.hpp's gradcheck_as: the point, r and u are rounded to
// the lower precision, so the tolerances are those of its rounding alone). Reductions, softmax
// and a dyn extent: test_gradcheck_lowp_reduce.cpp (two files, to keep each compile small).
#include "gradcheck.hpp"

#include <type_traits>

using namespace kiln;

namespace {
// placeholders as templates on the dtype: gradcheck_as builds each expression in D and in f64
template <dtype D> using A = input<"a", D, shape<3, 4>>;
template <dtype D> using B = input<"b", D, shape<3, 4>>;
template <dtype D> using P = input<"p", D, shape<3, 4>>;  // positive
template <dtype D> using Row = input<"row", D, shape<4>>;

std::vector<feed> feeds() {
  return {{"a", kt::random_f64(dims{3, 4})},
          {"b", kt::random_f64(dims{3, 4})},
          {"p", kt::random_f64(dims{3, 4}, 0.5, 2.5)},
          {"row", kt::random_f64(dims{4})}};
}

/// The dtype that a cast widens D to: bf16 to f32, f32 and f64 to f64.
template <dtype D> inline constexpr dtype wide = D == bf16 ? f32 : f64;
}  // namespace

TEST_CASE("cast: the derivative is cast back to the operand's dtype") {
  const auto f = feeds();
  using A64 = A<f64>;
  using B64 = B<f64>;
  // f64 -> f32 -> f64 in f64's harness: a step of 1e-2 against f32's ulp of 2.4e-7 at 2
  kt::gradcheck<A64, B64>(cast<f64>(cast<f32>(A64{})) * B64{}, f,
                          {.rtol = 1e-4, .atol = 1e-4, .h = 1e-2, .adjoint = 1e-6});
  // widened and narrowed again: bf16 -> f32 -> bf16, f32 -> f64 -> f32
  const auto e = []<dtype D>() { return cast<D>(exp(cast<wide<D>>(A<D>{}) * 0.5) * cast<wide<D>>(B<D>{})); };
  kt::gradcheck_as<f32, A, B>(e, f);
  kt::gradcheck_as<bf16, A, B>(e, f);
}

TEST_CASE_TEMPLATE("pointwise ops, broadcasting, transpose and matmul in f32 and bf16", DT,
                   std::integral_constant<dtype, f32>, std::integral_constant<dtype, bf16>) {
  constexpr dtype D = DT::value;
  const auto f = feeds();
  kt::gradcheck_as<D, A, B>([]<dtype E>() { return exp(A<E>{}) * B<E>{} + tanh(B<E>{}); }, f);
  kt::gradcheck_as<D, A, P>([]<dtype E>() { return A<E>{} / P<E>{} + log(P<E>{}) * sqrt(P<E>{}); }, f);
  kt::gradcheck_as<D, A, Row>([]<dtype E>() { return sigmoid(A<E>{}) * Row<E>{} + gelu(A<E>{}); }, f);
  kt::gradcheck_as<D, A, B>([]<dtype E>() { return matmul(transpose(A<E>{}), B<E>{}); }, f);
}
