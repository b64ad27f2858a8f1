// Derivatives of reductions and softmax computed in f32 and bf16, and through a dyn extent,
// against central differences of the same expression in f64 (tests/gradcheck.hpp's
// gradcheck_as; pointwise ops, matmul and casts: test_gradcheck_lowp.cpp).
#include "gradcheck.hpp"

#include <type_traits>

using namespace kiln;

namespace {
// placeholders as templates on the dtype: gradcheck_as builds each expression in D and in f64
template <dtype D> using A = input<"a", D, shape<3, 4>>;
template <dtype D> using T = input<"t", D, shape<2, 3, 4>>;
template <dtype D> using M = input<"m", D, shape<4, 5>>;
template <dtype D> using Xd = input<"x", D, shape<dyn, 4>>;
}  // namespace

TEST_CASE_TEMPLATE("reductions, softmax and a dyn extent in f32 and bf16", DT, std::integral_constant<dtype, f32>,
                   std::integral_constant<dtype, bf16>) {
  constexpr dtype D = DT::value;
  const std::vector<feed> f{{"a", kt::random_f64(dims{3, 4})},
                            {"t", kt::random_f64(dims{2, 3, 4})},
                            {"m", kt::random_f64(dims{4, 5})},
                            {"x", kt::random_f64(dims{5, 4})}};
  kt::gradcheck_as<D, T>([]<dtype E>() { return sum<-1>(T<E>{} * T<E>{}) * mean(T<E>{}); }, f);
  kt::gradcheck_as<D, A>([]<dtype E>() { return var<0>(A<E>{}) * amax<-2>(A<E>{}); }, f);
  kt::gradcheck_as<D, A>([]<dtype E>() { return softmax(A<E>{}) + log_softmax<0>(A<E>{}); }, f);
  kt::gradcheck_as<D, Xd, M>([]<dtype E>() { return matmul(Xd<E>{}, M<E>{}); }, f);
}
