// The backend contract (backend/backend.hpp), checked on every backend: the CPU backend, the
// eager reference, and `by_kernel`, a backend defined only here that runs a plan's kernels one
// after the other with the eager backend's bodies, keeping only what the plan keeps. It reaches
// eval, compile, the trainer and `out=` destinations with no change to any of them. Values are
// checked against plain loops, finite differences or the eager backend on the captured graph.
#include <kiln/optim.hpp>

#include <cstring>
#include <span>
#include <vector>

#include "cpu_support.hpp"

using namespace kiln;

namespace kt {

struct by_kernel {
  template <class P>
  static std::vector<any_tensor> run(const std::vector<any_tensor>& leaves, std::span<const any_tensor> into) {
    P::log_schedule();
    return deliver(eager::run_schedule(P::schedule(), leaves), into);
  }
};

}  // namespace kt

static_assert(backend_type<cpu::backend_t> && backend_type<eager::backend_t> && backend_type<kt::by_kernel>);
static_assert(!backend_type<int> && !backend_type<any_tensor>);

namespace {

using X = input<"x", f32, shape<dyn, 5>>;
using B = input<"b", f32, shape<5>>;
using W = param<"w", f32, shape<5, 3>>;

/// The same expression on the eager backend's captured graph: the reference for the others.
template <class E>
std::vector<any_tensor> reference(const E& e, std::initializer_list<feed> feeds) {
  return eager::run(traced<E>::value, bind_leaves(traced<E>::value, e, feeds));
}

}  // namespace

TEST_CASE_TEMPLATE("backend conformance: values", Bk, cpu::backend_t, eager::backend_t, kt::by_kernel) {
  const index_t rows = 1 + std::uniform_int_distribution<index_t>(0, 40)(kt::rng());
  const auto x = kt::random<float, 2>({rows, 5});
  const auto b = kt::random<float, 1>({5});
  const auto w = kt::random<float, 2>({5, 3});
  SUBCASE("pointwise with broadcasting, against a plain loop") {
    const tensor<float, 2> y = eval(gelu(X{} * 2.0f + B{}), {{"x", x}, {"b", b}}, Bk{});
    for (index_t i = 0; i < rows; ++i)
      for (index_t j = 0; j < 5; ++j) {
        const double z = 2.0 * x(i, j) + b(j);
        CHECK(kt::close(y(i, j), 0.5 * z * (1 + std::erf(z / std::sqrt(2.0))), 1e-5, 1e-6));
      }
  }
  SUBCASE("matmul, against a plain loop") {
    const tensor<float, 2> y = eval(matmul(X{}, W{}), {{"x", x}, {"w", w}}, Bk{});
    for (index_t i = 0; i < rows; ++i)
      for (index_t j = 0; j < 3; ++j) {
        double s = 0;
        for (index_t k = 0; k < 5; ++k) s += double(x(i, k)) * w(k, j);
        CHECK(kt::close(y(i, j), s, 1e-5, 1e-5));
      }
  }
  SUBCASE("reductions, softmax, layer_norm and several outputs") {
    const auto e = outputs(softmax<1>(X{}), sum<0>(X{} * X{}), layer_norm(X{}, B{}, B{} * 0.5f), amax<1>(X{}));
    const std::vector<any_tensor> got = eval_all(e, {{"x", x}, {"b", b}}, Bk{}), want = reference(e, {{"x", x}, {"b", b}});
    REQUIRE(got.size() == 4);
    for (std::size_t q = 0; q < got.size(); ++q) CHECK(kt::difference(want[q], got[q]) < 1e-5);
  }
  SUBCASE("integers are exact") {
    using I = input<"i", i64, shape<dyn>>;
    using J = input<"j", i64, shape<dyn>>;
    const auto i = kt::random<std::int64_t, 1>({rows}, -1000, 1000), j = kt::random<std::int64_t, 1>({rows}, -9, 9);
    const tensor<std::int64_t, 1> y = eval(I{} * J{} + I{} * 3 - J{}, {{"i", i}, {"j", j}}, Bk{});
    for (index_t k = 0; k < rows; ++k) CHECK(y(k) == i(k) * j(k) + i(k) * 3 - j(k));
  }
  SUBCASE("gather (an embedding), against a plain loop") {
    using T = input<"t", f32, shape<7, 4>>;
    using I = input<"i", i64, shape<dyn>>;
    const auto t = kt::random<float, 2>({7, 4});
    const auto i = kt::random<std::int64_t, 1>({rows}, 0, 7);
    const tensor<float, 2> y = eval(gather(T{}, I{}) * 3.0f, {{"t", t}, {"i", i}}, Bk{});
    for (index_t k = 0; k < rows; ++k)
      for (index_t c = 0; c < 4; ++c) CHECK(y(k, c) == 3.0f * t(i(k), c));
  }
  SUBCASE("a gradient, against central differences in f64") {
    using XD = input<"x", f64, shape<dyn, 5>>;
    using WD = param<"w", f64, shape<5, 3>>;
    const auto xd = kt::random<double, 2>({rows, 5});
    const auto wd = kt::random<double, 2>({5, 3});
    const auto loss = [] { return sum(tanh(matmul(XD{}, WD{}))); };
    const tensor<double, 2> g = eval(grad(loss(), WD{}), {{"x", xd}, {"w", wd}}, Bk{});
    for (index_t k = 0; k < 5; ++k)
      for (index_t c = 0; c < 3; ++c) {
        const double h = 1e-6, w0 = wd(k, c);
        wd(k, c) = w0 + h;
        const double up = eval(loss(), {{"x", xd}, {"w", wd}}, eager::backend)();
        wd(k, c) = w0 - h;
        const double down = eval(loss(), {{"x", xd}, {"w", wd}}, eager::backend)();
        wd(k, c) = w0;
        CHECK(kt::close(g(k, c), (up - down) / (2 * h), 1e-6, 1e-7));
      }
  }
}

TEST_CASE_TEMPLATE("backend conformance: compile, out= destinations and aliasing", Bk, cpu::backend_t, eager::backend_t,
                   kt::by_kernel) {
  const auto x = kt::random<float, 2>({6, 5});
  const auto b = kt::random<float, 1>({5});
  const auto e = outputs(X{} * 2.0f + B{}, sum<1>(X{}));
  const auto f = compile(e, Bk{});
  const std::vector<any_tensor> want = reference(e, {{"x", x}, {"b", b}});
  SUBCASE("new tensors, then the caller's (a strided view among them)") {
    const std::vector<any_tensor> fresh = f({{"x", x}, {"b", b}});
    for (std::size_t q = 0; q < 2; ++q) CHECK(kt::difference(want[q], fresh[q]) < 1e-6);
    tensor<float, 2> big({6, 10});
    const tensor<float, 2> strided = big.slice(1, 0, 10, 2);
    std::vector<any_tensor> out = {strided, any_tensor{}};
    f({{"x", x}, {"b", b}}, out);
    CHECK(out[0].shares_storage(big));
    CHECK(kt::difference(want[0], out[0]) < 1e-6);
    CHECK(kt::difference(want[1], out[1]) < 1e-6);
    for (index_t i = 0; i < 6; ++i) CHECK(big(i, 1) == 0.0f);  // the gaps are not written
  }
  SUBCASE("a destination that is an input reads the input's old values") {
    const tensor<float, 2> xc = x.clone();
    std::vector<any_tensor> out = {xc, any_tensor{}};
    f({{"x", xc}, {"b", b}}, out);
    CHECK(out[0].shares_storage(xc));
    CHECK(kt::difference(want[0], xc) < 1e-6);
    CHECK(kt::difference(want[1], out[1]) < 1e-6);
  }
  SUBCASE("a wrong destination throws and nothing is written, the aliased input included") {
    const tensor<float, 2> xc = x.clone();
    tensor<float, 1> wrong({5});
    std::vector<any_tensor> out = {xc, wrong};
    CHECK_THROWS_AS(f({{"x", xc}, {"b", b}}, out), shape_error);
    CHECK(kt::same_bits(xc, x));
    for (index_t i = 0; i < 5; ++i) CHECK(wrong(i) == 0.0f);
    tensor<double, 2> dtype_wrong({6, 5});
    out = {dtype_wrong, any_tensor{}};
    CHECK_THROWS_AS(f({{"x", x}, {"b", b}}, out), dtype_error);
  }
  SUBCASE("a run-time extent that does not fit throws a shape_error") {
    const auto bad = kt::random<float, 1>({4});
    CHECK_THROWS_AS(f({{"x", x}, {"b", bad}}), shape_error);
  }
}

TEST_CASE_TEMPLATE("backend conformance: caller memory (from_blob) as feeds and out= destinations", Bk, cpu::backend_t,
                   eager::backend_t, kt::by_kernel) {
  // buffers of exactly their elements (under ASan a read or write past one is an error)
  const auto e = outputs(X{} * 2.0f + B{}, sum<1>(X{}));
  const auto f = compile(e, Bk{});
  const auto x = kt::random<float, 2>({6, 5});
  const auto b = kt::random<float, 1>({5});
  const std::vector<any_tensor> want = reference(e, {{"x", x}, {"b", b}});
  // x as a caller's [5, 6] array, fed transposed (strides 1, 6)
  std::vector<float> xt(30), bv(5);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j) xt[static_cast<std::size_t>(j * 6 + i)] = x(i, j);
  std::memcpy(bv.data(), b.data(), sizeof(float) * 5);
  const dims xt_strides{1, 6};
  const any_tensor xv = any_tensor::from_blob(f32, xt.data(), dims{6, 5}, &xt_strides);
  const any_tensor bb = any_tensor::from_blob(f32, bv.data(), dims{5});
  CHECK(xv.shares_storage(xv));
  CHECK_FALSE(xv.is_contiguous());
  // destinations: a contiguous caller array, and every other element of a longer one
  std::vector<float> y(30, -1.0f), s(11, -1.0f);
  const dims s_strides{2};
  std::vector<any_tensor> out{any_tensor::from_blob(f32, y.data(), dims{6, 5}),
                              any_tensor::from_blob(f32, s.data(), dims{6}, &s_strides)};
  f({{"x", xv}, {"b", bb}}, out);
  CHECK(out[0].bytes() == reinterpret_cast<std::byte*>(y.data()));  // written in place
  for (int i = 0; i < 30; ++i) CHECK(y[static_cast<std::size_t>(i)] == want[0].data<float>()[i]);
  for (int i = 0; i < 11; ++i) {
    if (i % 2) CHECK(s[static_cast<std::size_t>(i)] == -1.0f);  // the gaps are not written
    else CHECK(s[static_cast<std::size_t>(i)] == doctest::Approx(want[1].data<float>()[i / 2]).epsilon(1e-6));
  }
  // a destination that is also a feed: the feed's old values are read
  std::vector<float> xy(30);
  std::memcpy(xy.data(), x.data(), sizeof(float) * 30);
  std::vector<any_tensor> inplace{any_tensor::from_blob(f32, xy.data(), dims{6, 5}), any_tensor{}};
  f({{"x", inplace[0]}, {"b", bb}}, inplace);
  for (int i = 0; i < 30; ++i) CHECK(xy[static_cast<std::size_t>(i)] == want[0].data<float>()[i]);
}

TEST_CASE("from_blob: release once the last view is gone; bad pointers, strides and shapes are refused") {
  std::vector<double> buf(12);
  int released = 0;
  {
    const any_tensor t = any_tensor::from_blob(
        f64, buf.data(), dims{3, 4}, nullptr, [](void* p, void* c) { *static_cast<int*>(c) += p != nullptr; }, &released);
    const any_tensor v = t.transpose(0, 1).slice(0, 1, 3);
    CHECK(released == 0);
    CHECK(v.shares_storage(t));
  }
  CHECK(released == 1);
  // no elements, no data: defined, empty
  const any_tensor none = any_tensor::from_blob(f32, nullptr, dims{0, 3});
  CHECK(none.defined());
  CHECK(none.numel() == 0);
  CHECK_THROWS_WITH_AS(any_tensor::from_blob(f32, nullptr, dims{2}), "kiln: from_blob: null data for a tensor of shape [2]",
                       std::invalid_argument);
  // misaligned for the element type
  CHECK_THROWS_WITH_AS(any_tensor::from_blob(f64, reinterpret_cast<std::byte*>(buf.data()) + 4, dims{2}),
                       doctest::Contains("not aligned to 8 bytes (f64)"), std::invalid_argument);
  const dims negative{-1}, long_stride{index_t{1} << 58}, two{1, 1};
  CHECK_THROWS_AS(any_tensor::from_blob(f64, buf.data(), dims{2}, &negative), shape_error);
  CHECK_THROWS_WITH_AS(any_tensor::from_blob(f64, buf.data(), dims{4}, &long_stride), doctest::Contains("reach past 2^59"),
                       shape_error);
  CHECK_THROWS_AS(any_tensor::from_blob(f64, buf.data(), dims{2}, &two), shape_error);
  CHECK_THROWS_AS(any_tensor::from_blob(f64, buf.data(), dims{index_t{1} << 40, index_t{1} << 40}), shape_error);
  // a wrong destination is refused before anything is written
  using V = input<"v", f64, shape<dyn>>;
  const auto g = compile(V{} * 3.0);
  std::vector<double> in(4, 1.0), dst(3, 7.0);
  std::vector<any_tensor> out{any_tensor::from_blob(f64, dst.data(), dims{3})};
  CHECK_THROWS_AS(g({{"v", any_tensor::from_blob(f64, in.data(), dims{4})}}, out), shape_error);
  CHECK(dst == std::vector<double>(3, 7.0));
}

TEST_CASE_TEMPLATE("backend conformance: eval_into and the trainer", Bk, cpu::backend_t, eager::backend_t, kt::by_kernel) {
  const auto x = kt::random<float, 2>({4, 5});
  any_tensor dest = any_tensor(f32, dims{4, 5});
  eval_into(exp(x + x), dest, Bk{});
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 5; ++j)
      CHECK(kt::close(dest.data<float>()[i * 5 + j], std::exp(2.0 * x(i, j)), 1e-6, 1e-6));

  // loss = sum(p * q): its gradient is q, a fresh random tensor each step; SGD with weight decay
  using P = param<"p", f64, shape<3, 4>>;
  using Q = input<"q", f64, shape<3, 4>>;
  nn::state_dict init;
  init["p"] = kt::random<double, 2>({3, 4}).any();
  std::vector<double> ref(init.at("p").data<double>(), init.at("p").data<double>() + 12);
  optim::trainer tr(sum(P{} * Q{}), std::tuple<P>{}, optim::sgd{.lr = 0.1, .weight_decay = 0.01}, init,
                    optim::no_clipping{}, Bk{});
  for (int t = 0; t < 5; ++t) {
    const auto q = kt::random<double, 2>({3, 4});
    double loss = 0;
    for (int k = 0; k < 12; ++k) loss += ref[static_cast<std::size_t>(k)] * q.data()[k];
    CHECK(kt::close(tr.step({{"q", q}}), loss, 1e-12, 1e-12));
    for (int k = 0; k < 12; ++k) ref[static_cast<std::size_t>(k)] -= 0.1 * (q.data()[k] + 0.01 * ref[static_cast<std::size_t>(k)]);
  }
  for (int k = 0; k < 12; ++k) CHECK(kt::close(tr.params().at("p").template data<double>()[k], ref[static_cast<std::size_t>(k)], 1e-12, 1e-12));
}
