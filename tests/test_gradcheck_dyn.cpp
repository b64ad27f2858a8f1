// gradcheck through a dyn extent: the derivatives of reductions, broadcasts, transpose and
// matmul take the run-time extent, at 1 (the extent a broadcast axis has) and at 4.
#include "gradcheck.hpp"

using namespace kiln;

namespace {
using X = input<"x", f64, shape<dyn, 3>>;
using Z = input<"z", f64, shape<2, dyn, 3>>;
using W = input<"w", f64, shape<3, 2>>;
using Bv = input<"bv", f64, shape<3>>;
}  // namespace

TEST_CASE("a dyn extent: derivatives take the run-time extent") {
  for (const index_t n : {1, 4}) {
    CAPTURE(n);
    const std::vector<feed> f{{"x", kt::random_f64(dims{n, 3})},
                              {"z", kt::random_f64(dims{2, n, 3})},
                              {"w", kt::random_f64(dims{3, 2})},
                              {"bv", kt::random_f64(dims{3})}};
    kt::gradcheck<X, Bv>(tanh(X{}) * Bv{}, f);  // bv broadcast over the dyn extent
    kt::gradcheck<X>(sum<0>(X{} * X{}), f);
    kt::gradcheck<X>(mean(X{}), f);  // 1 / (3 n)
    if (n > 1) kt::gradcheck<X>(var<-2>(X{}), f);  // 1 / (n - 1)
    kt::gradcheck<X>(amax<-1>(X{}, keepdim), f);
    kt::gradcheck<X>(transpose(X{}), f);
    kt::gradcheck<X, W>(matmul(X{}, W{}), f);
    kt::gradcheck<X>(softmax<0>(X{}), f);
    kt::gradcheck<Z>(sum<-2>(Z{} * Z{}), f);  // a dyn extent between static ones
  }
}
