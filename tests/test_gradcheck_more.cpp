// gradcheck of what tests/test_autodiff.cpp leaves out: transpose alone, reductions over all axes
// and over negative axes (dyn extents: test_gradcheck_dyn.cpp; casts, f32 and bf16:
// test_gradcheck_lowp.cpp; each file small, to keep its compile time small).
#include "gradcheck.hpp"

using namespace kiln;

namespace {
using A = input<"a", f64, shape<3, 4>>;
using T = input<"t", f64, shape<2, 3, 4>>;

std::vector<feed> feeds() { return {{"a", kt::random_f64(dims{3, 4})}, {"t", kt::random_f64(dims{2, 3, 4})}}; }
}  // namespace

TEST_CASE("transpose alone") {
  const auto f = feeds();
  kt::gradcheck<A>(transpose(A{}), f);
  kt::gradcheck<T>(transpose<0, 2>(T{}), f);  // the outer and the inner axis
  kt::gradcheck<T>(transpose<-3, -2>(T{}), f);
}

TEST_CASE("reductions over all axes") {
  const auto f = feeds();
  kt::gradcheck<T>(sum(T{} * T{}), f);
  kt::gradcheck<T>(sum<0, 1, 2>(T{}, keepdim), f);
  kt::gradcheck<T>(mean(T{}), f);
  kt::gradcheck<T>(var(T{}), f);
  kt::gradcheck<T>(amax(T{}), f);  // random inputs have no ties
  kt::gradcheck<T>(amin(T{}, keepdim), f);
}

TEST_CASE("reductions over negative axes") {
  const auto f = feeds();
  kt::gradcheck<T>(sum<-1>(T{}), f);
  kt::gradcheck<T>(sum<-1, -3>(T{} * T{}), f);
  kt::gradcheck<T>(mean<0, -2>(T{}, keepdim), f);
  kt::gradcheck<T>(var<-3>(T{}), f);
  kt::gradcheck<T>(amax<-1>(T{}, keepdim), f);
  kt::gradcheck<T>(amin<-2>(T{}), f);
  kt::gradcheck<T>(softmax<-2>(T{}), f);
}
