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

TEST_CASE("derivatives through a dyn extent have the run-time extent (reductions, broadcast operands)") {
  using X = input<"x", f64, shape<dyn, 3>>;
  using Bv = input<"bv", f64, shape<3>>;
  using U = input<"u", f64, shape<3>>;
  using W = input<"w", f64, shape<3, 2>>;
  using DW = input<"dw", f64, shape<3, 2>>;
  for (const index_t n : {1, 4}) {
    CAPTURE(n);
    const auto x = kt::random<double, 2>({n, 3});
    const auto bv = kt::random<double, 1>({3});
    const auto u = kt::random<double, 1>({3});
    const auto w = kt::random<double, 2>({3, 2});
    const auto dw = kt::random<double, 2>({3, 2});
    // each check on both backends: the run-time shape is [n, 3], the values the analytic ones
    const auto each_backend = [&](const auto& e, const auto& want, const auto&... feeds) {
      const tensor<double, 2> got[] = {eval(e, feeds...), eval(e, feeds..., eager::backend)};
      for (const auto& g : got) {
        REQUIRE(g.size(0) == n);
        REQUIRE(g.size(1) == 3);
        for (index_t i = 0; i < n; ++i)
          for (index_t j = 0; j < 3; ++j) CHECK(kt::close(g(i, j), want(i, j), 1e-14, 1e-14));
      }
    };
    each_backend(grad(sum(X{} * Bv{}), X{}), [&](index_t, index_t j) { return bv(j); }, X{} = x, Bv{} = bv);
    each_backend(grad(sum(X{}), X{}), [](index_t, index_t) { return 1.0; }, X{} = x);
    each_backend(grad(sum(sum<1>(X{})), X{}), [](index_t, index_t) { return 1.0; }, X{} = x);
    each_backend(grad(mean(X{}), X{}), [&](index_t, index_t) { return 1.0 / static_cast<double>(3 * n); }, X{} = x);
    each_backend(grad(sum(sum<0>(X{}) * Bv{}), X{}), [&](index_t, index_t j) { return bv(j); }, X{} = x, Bv{} = bv);
    // forward mode: the tangent of the broadcast operand takes the batch extent
    each_backend(jvp(X{} + Bv{}, tangent(Bv{}, U{})), [&](index_t, index_t j) { return u(j); }, X{} = x, Bv{} = bv,
                 U{} = u);
    each_backend(jvp(where(X{} > 0.0, Bv{}, X{}), tangent(Bv{}, U{})),
                 [&](index_t i, index_t j) { return x(i, j) > 0 ? u(j) : 0.0; }, X{} = x, Bv{} = bv, U{} = u);
    const auto xw_dw = [&](index_t i, index_t j) {
      double s = 0;
      for (index_t k = 0; k < 3; ++k) s += x(i, k) * dw(k, j);
      return s;
    };
    const auto jm = jvp(matmul(X{}, W{}), tangent(W{}, DW{}));
    const tensor<double, 2> got[] = {eval(jm, X{} = x, W{} = w, DW{} = dw),
                                     eval(jm, X{} = x, W{} = w, DW{} = dw, eager::backend)};
    for (const auto& g : got) {
      REQUIRE(g.size(0) == n);
      for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < 2; ++j) CHECK(kt::close(g(i, j), xw_dw(i, j), 1e-14, 1e-14));
    }
  }
}

TEST_CASE("forward mode along a conv2d bias with a dyn batch") {
  using X = input<"x", f64, shape<dyn, 1, 5, 5>>;
  using W = input<"w", f64, shape<2, 1, 3, 3>>;
  using Bc = input<"bc", f64, shape<2>>;
  using U = input<"u", f64, shape<2>>;
  const auto x = kt::random<double, 4>({3, 1, 5, 5});
  const auto w = kt::random<double, 4>({2, 1, 3, 3});
  const auto bc = kt::random<double, 1>({2});
  const auto u = kt::random<double, 1>({2});
  const auto e = jvp(conv2d(X{}, W{}, Bc{}), tangent(Bc{}, U{}));
  for (const tensor<double, 4>& g : {eval(e, X{} = x, W{} = w, Bc{} = bc, U{} = u),
                                     eval(e, X{} = x, W{} = w, Bc{} = bc, U{} = u, eager::backend)}) {
    REQUIRE(g.size(0) == 3);
    for (index_t i = 0; i < 3; ++i)
      for (index_t o = 0; o < 2; ++o)
        for (index_t p = 0; p < 3; ++p)
          for (index_t q = 0; q < 3; ++q) CHECK(g(i, o, p, q) == u(o));
  }
}
