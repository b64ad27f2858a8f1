// 2-D windows: unfold and fold against hand values and plain loops, fold as unfold's adjoint,
// conv2d and the poolings (the eager backend's direct loops against the test's own loops, the
// decomposition against them, the CPU backend against eager), and the fused structure.
#include "cpu_support.hpp"

#include <limits>
#include <vector>

using namespace kiln;

namespace {

/// A plain convolution, in double: x [n, c, h, w], w [o, c, kh, kw], optional bias [o].
std::vector<double> conv_loop(const any_tensor& x, const any_tensor& w, const any_tensor* b, index_t s, index_t p,
                              index_t d, dims& out) {
  const auto X = kt::values_of(x), W = kt::values_of(w);
  const index_t n = x.shape().e[0], c = x.shape().e[1], h = x.shape().e[2], wd = x.shape().e[3];
  const index_t o = w.shape().e[0], kh = w.shape().e[2], kw = w.shape().e[3];
  const index_t ho = (h + 2 * p - d * (kh - 1) - 1) / s + 1, wo = (wd + 2 * p - d * (kw - 1) - 1) / s + 1;
  out = dims{n, o, ho, wo};
  std::vector<double> y(static_cast<std::size_t>(n * o * ho * wo), 0.0);
  const std::vector<double> B = b ? kt::values_of(*b) : std::vector<double>(static_cast<std::size_t>(o), 0.0);
  for (index_t i = 0; i < n; ++i)
    for (index_t q = 0; q < o; ++q)
      for (index_t oy = 0; oy < ho; ++oy)
        for (index_t ox = 0; ox < wo; ++ox) {
          double acc = B[static_cast<std::size_t>(q)];
          for (index_t ch = 0; ch < c; ++ch)
            for (index_t ky = 0; ky < kh; ++ky)
              for (index_t kx = 0; kx < kw; ++kx) {
                const index_t iy = oy * s - p + ky * d, ix = ox * s - p + kx * d;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                acc += X[static_cast<std::size_t>(((i * c + ch) * h + iy) * wd + ix)] *
                       W[static_cast<std::size_t>(((q * c + ch) * kh + ky) * kw + kx)];
              }
          y[static_cast<std::size_t>(((i * o + q) * ho + oy) * wo + ox)] = acc;
        }
  return y;
}

/// A plain pooling loop: max (padding ignored) or mean (padding counted as zeros).
std::vector<double> pool_loop(const any_tensor& x, index_t k, index_t s, index_t p, bool is_max, dims& out) {
  const auto X = kt::values_of(x);
  const index_t n = x.shape().e[0], c = x.shape().e[1], h = x.shape().e[2], wd = x.shape().e[3];
  const index_t ho = (h + 2 * p - k) / s + 1, wo = (wd + 2 * p - k) / s + 1;
  out = dims{n, c, ho, wo};
  std::vector<double> y;
  for (index_t i = 0; i < n * c; ++i)
    for (index_t oy = 0; oy < ho; ++oy)
      for (index_t ox = 0; ox < wo; ++ox) {
        double acc = is_max ? -INFINITY : 0.0;
        for (index_t ky = 0; ky < k; ++ky)
          for (index_t kx = 0; kx < k; ++kx) {
            const index_t iy = oy * s - p + ky, ix = ox * s - p + kx;
            if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
            const double v = X[static_cast<std::size_t>((i * h + iy) * wd + ix)];
            acc = is_max ? std::max(acc, v) : acc + v;
          }
        y.push_back(is_max ? acc : acc / static_cast<double>(k * k));
      }
  return y;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]) / (1 + std::fabs(a[i])));
  return m;
}

}  // namespace

TEST_CASE("unfold: hand values, padding, stride and dilation") {
  // one 3x3 image 1..9, 2x2 windows, stride 1: columns are the four windows
  // (window ops need static channels and spatial extents: placeholders, not bound tensors)
  using X = input<"x", f32, shape<1, 1, 3, 3>>;
  tensor<float, 4> x({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  const any_tensor u = eval_any(unfold<2>(X{}), {{"x", x}}, eager::backend);
  REQUIRE(u.shape() == dims{1, 4, 4});
  const std::vector<double> want = {1, 2, 4, 5, 2, 3, 5, 6, 4, 5, 7, 8, 5, 6, 8, 9};  // rows (ky, kx), columns windows
  CHECK(kt::values_of(u) == want);
  // padding 1, stride 2: windows at (-1,-1), (-1,1), (1,-1), (1,1) of the padded image
  const any_tensor v = eval_any(unfold<2, 2, 1>(X{}), {{"x", x}}, eager::backend);
  REQUIRE(v.shape() == dims{1, 4, 4});
  CHECK(kt::values_of(v) == std::vector<double>{0, 0, 0, 5, 0, 0, 4, 6, 0, 2, 0, 8, 1, 3, 7, 9});
  // dilation 2 on a 3x3 image: one window, the corners and centre's corners
  const any_tensor d = eval_any(unfold<2, 1, 0, 2>(X{}), {{"x", x}}, eager::backend);
  REQUIRE(d.shape() == dims{1, 4, 1});
  CHECK(kt::values_of(d) == std::vector<double>{1, 3, 7, 9});
  // the CPU backend gives the same
  CHECK(kt::values_of(eval_any(unfold<2, 2, 1>(X{}), {{"x", x}})) == kt::values_of(v));
}

TEST_CASE("fold is unfold's adjoint: <unfold(x), c> = <x, fold(c)>") {
  using X = input<"x", f64, shape<dyn, 3, 7, 6>>;
  using C3 = input<"c", f64, shape<dyn, 27, 42>>;      // 3x3, stride 1, padding 1
  using C2 = input<"c", f64, shape<dyn, 12, 16>>;      // 2x2, stride 2, padding 1: 4x4 windows
  const any_tensor x = kt::random_tensor(f64, dims{2, 3, 7, 6});
  auto check = [&](const auto& ue, const auto& fe, const dims& cshape) {
    const any_tensor c = kt::random_tensor(f64, cshape);
    const auto ux = kt::values_of(eval_any(ue, {{"x", x}}, eager::backend));
    const auto fc = kt::values_of(eval_any(fe, {{"c", c}}, eager::backend));
    const auto xv = kt::values_of(x), cv = kt::values_of(c);
    double lhs = 0, rhs = 0;
    for (std::size_t i = 0; i < ux.size(); ++i) lhs += ux[i] * cv[i];
    for (std::size_t i = 0; i < xv.size(); ++i) rhs += xv[i] * fc[i];
    CHECK(kt::close(lhs, rhs, 1e-12, 1e-12));
    // and the CPU backend's fold is the eager one's
    CHECK(kt::cpu_vs_eager(fe, {{"c", c}}) <= 1e-13);
    CHECK(kt::cpu_vs_eager(ue, {{"x", x}}) == 0);
  };
  check(unfold<3, 1, 1>(X{}), fold<7, 6, 3, 1, 1>(C3{}), dims{2, 27, 42});
  check(unfold<2, 2, 1>(X{}), fold<7, 6, 2, 2, 1>(C2{}), dims{2, 12, 16});
}

TEST_CASE("conv2d: eager, decomposed and CPU against a plain loop") {
  using X = input<"x", f32, shape<dyn, 3, 9, 8>>;
  using W = param<"w", f32, shape<5, 3, 3, 3>>;
  using B = param<"b", f32, shape<5>>;
  const any_tensor x = kt::random_tensor(f32, dims{2, 3, 9, 8}), w = kt::random_tensor(f32, dims{5, 3, 3, 3}),
                   b = kt::random_tensor(f32, dims{5});
  auto check = [&](const auto& e, index_t s, index_t p, index_t d, bool bias) {
    INFO("stride " << s << " padding " << p << " dilation " << d << " bias " << bias);
    dims shape;
    const std::vector<double> want = conv_loop(x, w, bias ? &b : nullptr, s, p, d, shape);
    const std::vector<feed> f = bias ? std::vector<feed>{{"x", x}, {"w", w}, {"b", b}} : std::vector<feed>{{"x", x}, {"w", w}};
    const any_tensor ref = eval_all(e, std::span<const feed>(f), eager::backend)[0];  // direct loops
    REQUIRE(ref.shape() == shape);
    CHECK(max_diff(want, kt::values_of(ref)) <= 1e-6);
    CHECK(max_diff(want, kt::values_of(eval_all(e, std::span<const feed>(f))[0])) <= 1e-5);  // decomposed, CPU
    CHECK(kt::cpu_vs_eager(e, {{"x", x}, {"w", w}, {"b", b}}) <= 1e-5);
  };
  check(conv2d(X{}, W{}, B{}), 1, 0, 1, true);
  check(conv2d<1, 1>(X{}, W{}, B{}), 1, 1, 1, true);
  check(conv2d<2, 1>(X{}, W{}, B{}), 2, 1, 1, true);
  check(conv2d<1, 2, 2>(X{}, W{}, B{}), 1, 2, 2, true);
  check(conv2d<2>(X{}, W{}), 2, 0, 1, false);
  // a 1x1 convolution is a matmul over channels; a rectangular kernel
  using W1 = param<"w", f32, shape<5, 3, 1, 1>>;
  const any_tensor w1 = kt::random_tensor(f32, dims{5, 3, 1, 1});
  dims s1;
  const auto want1 = conv_loop(x, w1, &b, 1, 0, 1, s1);
  CHECK(max_diff(want1, kt::values_of(eval_any(conv2d(X{}, W1{}, B{}), {{"x", x}, {"w", w1}, {"b", b}}))) <= 1e-5);
  using W23 = param<"w", f32, shape<4, 3, 2, 3>>;
  const any_tensor w23 = kt::random_tensor(f32, dims{4, 3, 2, 3});
  dims s23;
  const auto want23 = conv_loop(x, w23, nullptr, 1, 1, 1, s23);
  CHECK(max_diff(want23, kt::values_of(eval_any(conv2d<1, 1>(X{}, W23{}), {{"x", x}, {"w", w23}}))) <= 1e-5);
  // batch 1 and an odd batch
  for (index_t n : {1, 5}) {
    const any_tensor xn = kt::random_tensor(f32, dims{n, 3, 9, 8});
    CHECK(kt::cpu_vs_eager(relu(conv2d<1, 1>(X{}, W{}, B{})), {{"x", xn}, {"w", w}, {"b", b}}) <= 1e-5);
  }
}

TEST_CASE("max_pool2d and avg_pool2d against plain loops") {
  using X = input<"x", f32, shape<dyn, 2, 7, 6>>;
  const any_tensor x = kt::random_tensor(f32, dims{3, 2, 7, 6});
  auto check = [&](const auto& e, index_t k, index_t s, index_t p, bool is_max) {
    INFO("max " << is_max << " kernel " << k << " stride " << s << " padding " << p);
    dims shape;
    const std::vector<double> want = pool_loop(x, k, s, p, is_max, shape);
    const any_tensor ref = eval_any(e, {{"x", x}}, eager::backend);
    REQUIRE(ref.shape() == shape);
    CHECK(max_diff(want, kt::values_of(ref)) <= 1e-6);
    CHECK(max_diff(want, kt::values_of(eval_any(e, {{"x", x}}))) <= 1e-6);
    CHECK(kt::cpu_vs_eager(e, {{"x", x}}) <= 1e-6);
  };
  check(max_pool2d<2>(X{}), 2, 2, 0, true);
  check(max_pool2d<3, 2, 1>(X{}), 3, 2, 1, true);
  check(max_pool2d<3, 1, 1>(X{}), 3, 1, 1, true);
  check(avg_pool2d<2>(X{}), 2, 2, 0, false);
  check(avg_pool2d<3, 2, 1>(X{}), 3, 2, 1, false);
  // all-negative inputs: -inf padding never wins a max, zero padding lowers the mean
  const any_tensor neg = eval_any(max_pool2d<3, 2, 1>(X{}) * 1.0f, {{"x", kt::random_tensor(f32, dims{1, 2, 7, 6}, -5, -1)}});
  for (double v : kt::values_of(neg)) CHECK(v < -1 + 1e-6);
  // NaN in a window propagates, as with amax
  any_tensor xn = x.clone();
  xn.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(kt::values_of(eval_any(max_pool2d<2>(X{}), {{"x", xn}}))[0]));
  CHECK(std::isnan(kt::values_of(eval_any(max_pool2d<2>(X{}), {{"x", xn}}, eager::backend))[0]));
}

TEST_CASE("run-time shape checks") {
  using X = input<"x", f32, shape<dyn, 3, 9, 8>>;
  using W = param<"w", f32, shape<5, 3, 3, 3>>;
  // a tensor of the wrong spatial extent is rejected by the binding, naming the placeholder
  CHECK_THROWS_AS(eval_any(conv2d(X{}, W{}), {{"x", kt::random_tensor(f32, dims{2, 3, 8, 8})}, {"w", kt::random_tensor(f32, dims{5, 3, 3, 3})}}),
                  shape_error);
  // an empty batch is fine: nothing to compute
  const any_tensor e = eval_any(conv2d<1, 1>(X{}, W{}), {{"x", any_tensor(f32, dims{0, 3, 9, 8})}, {"w", kt::random_tensor(f32, dims{5, 3, 3, 3})}});
  CHECK(e.shape() == dims{0, 5, 9, 8});
}

TEST_CASE("structure: conv2d + bias + relu is one im2col kernel and one matmul with its epilogue") {
  using X = input<"x", f32, shape<dyn, 3, 9, 8>>;
  using W = param<"w", f32, shape<5, 3, 3, 3>>;
  using B = param<"b", f32, shape<5>>;
  constexpr explanation e = explain_type<decltype(conv2d<1, 1>(X{}, W{}, B{}))>();
  static_assert(e.kernels == 2 && e.matmul_kernels == 1);
  constexpr const auto& g = prims_plan<decltype(conv2d<1, 1>(X{}, W{}, B{}))>::graph;
  static_assert(count_op(g, op::unfold) == 1 && count_op(g, op::matmul) == 1 && count_op(g, op::conv2d) == 0);
  static_assert(!check_graph(g));
  // pooling is an unfold and a reduction over the window axis
  constexpr const auto& p = prims_plan<decltype(max_pool2d<2>(X{}))>::graph;
  static_assert(count_op(p, op::unfold) == 1 && count_op(p, op::amax) == 1 && count_op(p, op::max_pool2d) == 0);
  // the passes run at run time too
  const graph r = passes::to_primitives(traced<decltype(avg_pool2d<3, 2, 1>(X{}))>::value.thaw());
  CHECK(check_graph(r) == nullptr);
  CHECK(count_op(r, op::unfold) == 1);
  CHECK(count_op(r, op::sum) == 1);
}

TEST_CASE("canonicalize: a pointwise op after a reshape joins the reshape's producer") {
  using X = input<"x", f32, shape<dyn, 3, 9, 8>>;
  using W = param<"w", f32, shape<5, 3, 3, 3>>;
  using B = param<"b", f32, shape<5>>;
  // relu(reshape(matmul + bias)) becomes reshape(relu(matmul + bias)): one matmul kernel
  using E = decltype(relu(conv2d<1, 1>(X{}, W{}, B{})));
  constexpr explanation e = explain_type<E>();
  static_assert(e.kernels == 2 && e.matmul_kernels == 1);
  constexpr const auto& g = prims_plan<E>::graph;
  static_assert(g.nodes[static_cast<std::size_t>(g.outputs[0])].o == op::reshape);
  // not when the other operand is a tensor of the reshaped shape
  using Y = input<"y", f32, shape<dyn, 5, 9, 8>>;
  constexpr const auto& h = prims_plan<decltype(conv2d<1, 1>(X{}, W{}, B{}) + Y{})>::graph;
  static_assert(h.nodes[static_cast<std::size_t>(h.outputs[0])].o == op::add);
  const any_tensor x = kt::random_tensor(f32, dims{2, 3, 9, 8}), w = kt::random_tensor(f32, dims{5, 3, 3, 3}),
                   b = kt::random_tensor(f32, dims{5});
  CHECK(kt::cpu_vs_eager(relu(conv2d<1, 1>(X{}, W{}, B{})) * 2.0f, {{"x", x}, {"w", w}, {"b", b}}) <= 1e-5);
}
