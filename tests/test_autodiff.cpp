// Reverse and forward mode of every primitive, checked against central finite differences in
// f64 on fresh random inputs, and against each other (tests/gradcheck.hpp).
#include "gradcheck.hpp"

using namespace kiln;

namespace {
using A = input<"a", f64, shape<3, 4>>;
using B = input<"b", f64, shape<3, 4>>;
using Row = input<"row", f64, shape<4>>;
using Col = input<"col", f64, shape<3, 1>>;
using P = input<"p", f64, shape<3, 4>>;  // positive

std::vector<feed> feeds() {
  return {{"a", kt::random_f64(dims{3, 4})},
          {"b", kt::random_f64(dims{3, 4})},
          {"row", kt::random_f64(dims{4})},
          {"col", kt::random_f64(dims{3, 1})},
          {"p", kt::random_f64(dims{3, 4}, 0.5, 2.5)}};
}
}  // namespace

TEST_CASE("unary primitives") {
  const auto f = feeds();
  kt::gradcheck<A>(-A{}, f);
  kt::gradcheck<A>(abs(A{}), f);
  kt::gradcheck<A>(exp(A{}), f);
  kt::gradcheck<P>(log(P{}), f);
  kt::gradcheck<P>(sqrt(P{}), f);
  kt::gradcheck<P>(rsqrt(P{}), f);
  kt::gradcheck<P>(reciprocal(P{}), f);
  kt::gradcheck<A>(tanh(A{}), f);
  kt::gradcheck<A>(sin(A{}), f);
  kt::gradcheck<A>(cos(A{}), f);
  kt::gradcheck<A>(erf(A{}), f);
}

TEST_CASE("binary primitives, with broadcasting") {
  const auto f = feeds();
  kt::gradcheck<A, B>(A{} + B{}, f);
  kt::gradcheck<A, Row>(A{} - Row{}, f);
  kt::gradcheck<A, Col>(A{} * Col{}, f);
  kt::gradcheck<A, P>(A{} / P{}, f);
  kt::gradcheck<Row, P>(Row{} / P{}, f);
  kt::gradcheck<A, B>(max(A{}, B{}), f);
  kt::gradcheck<A, Col>(min(A{}, Col{}), f);
  kt::gradcheck<P, A>(pow(P{}, A{}), f);
  kt::gradcheck<A>(A{} * A{} * 0.5 + A{}, f);  // one operand used twice
}

TEST_CASE("where, casts and comparisons") {
  const auto f = feeds();
  kt::gradcheck<A, B>(where(A{} > B{}, A{} * 2.0, B{}), f);
  kt::gradcheck<A, Row>(where(A{} > 0.0, Row{}, 1.5), f);
  kt::gradcheck<A>(cast<f64>(cast<f32>(A{})) * 0.0 + A{} * cast<f64>(A{} > 0.0), f);  // no gradient through the mask
}

TEST_CASE("reductions over each axis") {
  const auto f = feeds();
  kt::gradcheck<A>(sum<0>(A{}), f);
  kt::gradcheck<A>(sum<1>(A{}, keepdim), f);
  kt::gradcheck<A>(sum(A{}), f);
  kt::gradcheck<A>(mean<1>(A{}), f);
  kt::gradcheck<A>(var<0>(A{}), f);
  kt::gradcheck<A>(amax<1>(A{}), f);
  kt::gradcheck<A>(amin<0>(A{}, keepdim), f);
}

TEST_CASE("matmul, batched and broadcast") {
  using M = input<"m", f64, shape<4, 5>>;
  using Batch = input<"bt", f64, shape<2, 3, 4>>;
  std::vector<feed> f{{"a", kt::random_f64(dims{3, 4})},
                      {"m", kt::random_f64(dims{4, 5})},
                      {"bt", kt::random_f64(dims{2, 3, 4})}};
  kt::gradcheck<A, M>(matmul(A{}, M{}), f);
  kt::gradcheck<Batch, M>(matmul(Batch{}, M{}), f);  // M broadcast over the batch
  kt::gradcheck<A>(matmul(A{}, transpose(A{})), f);
}

TEST_CASE("shape ops: reshape, permute, broadcast, slice, concat") {
  const auto f = feeds();
  kt::gradcheck<A>(reshape<2, 6>(A{}) * reshape<2, 6>(A{}), f);
  kt::gradcheck<A>(permute<1, 0>(A{}) * 1.5, f);
  kt::gradcheck<Row>(broadcast_to<3, 4>(Row{}), f);
  kt::gradcheck<A>(slice<1, 1, 3>(A{}), f);
  kt::gradcheck<A>(slice<1, 0, 4, 3>(A{}), f);  // strided: elements 0 and 3
  kt::gradcheck<A>(slice<0, 1, 3, 2>(A{}), f);  // strided, the last element not at the end
  kt::gradcheck<A, B>(concat<0>(A{}, B{}), f);
  kt::gradcheck<A, Col>(concat<1>(A{}, Col{} * 2.0), f);
}

TEST_CASE("max and amax with ties: the gradient is shared as PyTorch shares it") {
  using X = input<"x", f64, shape<4>>;
  tensor<double, 1> x({4});
  x.data()[0] = 1;
  x.data()[1] = 3;
  x.data()[2] = 3;
  x.data()[3] = -1;
  // amax: the two maxima share the gradient evenly
  auto g = eval(grad(amax(X{}), X{}), {{"x", x.any()}});
  CHECK(g(0) == 0.0);
  CHECK(g(1) == 0.5);
  CHECK(g(2) == 0.5);
  CHECK(g(3) == 0.0);
  // max of two differentiable operands: a tie splits evenly (torch.maximum)
  using Y = input<"y", f64, shape<4>>;
  tensor<double, 1> y({4});
  for (int i = 0; i < 4; ++i) y.data()[i] = 3;
  auto [gx, gy] = grad(sum(max(X{}, Y{})), wrt(X{}, Y{}));
  auto gxv = eval(gx, {{"x", x.any()}, {"y", y.any()}});
  auto gyv = eval(gy, {{"x", x.any()}, {"y", y.any()}});
  const double want_x[] = {0, 0.5, 0.5, 0}, want_y[] = {1, 0.5, 0.5, 1};
  for (int i = 0; i < 4; ++i) {
    CHECK(gxv(i) == want_x[i]);
    CHECK(gyv(i) == want_y[i]);
  }
  // relu = max(x, 0) against a constant: 0 at the kink, as torch.relu
  tensor<double, 1> z({4});
  z.data()[0] = -1;
  z.data()[1] = 0;
  z.data()[2] = 2;
  z.data()[3] = 0.5;
  auto gr = eval(grad(sum(relu(X{})), X{}), {{"x", z.any()}});
  const double want_r[] = {0, 0, 1, 1};
  for (int i = 0; i < 4; ++i) CHECK(gr(i) == want_r[i]);
  // abs'(0) = 0
  auto ga = eval(grad(sum(abs(X{})), X{}), {{"x", z.any()}});
  const double want_a[] = {-1, 0, 1, 1};
  for (int i = 0; i < 4; ++i) CHECK(ga(i) == want_a[i]);
}
