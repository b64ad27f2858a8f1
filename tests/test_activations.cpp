// Activation ops added through the op catalogue (docs/adding-an-op.md), each checked against an
// independent reference: a plain loop in long double, its analytic derivative, central finite
// differences in f64, on both backends, on fresh random inputs and at the edge values.
#include "cpu_support.hpp"

#include <limits>
#include <vector>

using namespace kiln;

namespace {

/// torch.nn.functional.softplus with beta 1 and threshold 20, in long double.
long double softplus_ref(long double x) { return x > 20 ? x : std::log1p(std::exp(x)); }
long double sigmoid_ref(long double x) { return 1 / (1 + std::exp(-x)); }

/// Random values over [-40, 40] and the edges: around the threshold, where 1 + e^x rounds to 1,
/// far tails, zeros, and in f32 infinities and NaN (xsimd's f64 exp converts its argument to an
/// integer, which is undefined for them: -fsanitize=float-cast-overflow stops there; kiln's own
/// f32 exp does not).
template <class T>
tensor<T, 1> softplus_inputs(index_t random_count) {
  const T inf = std::numeric_limits<T>::infinity();
  std::vector<T> v = {-1000, -100, -40, -20, -17, -16, -1e-3f, 0, -0.0f, 1e-3f, 1, 19.9f, 20, 20.1f, 88, 100, 1e4f};
  if constexpr (std::is_same_v<T, float>) v.insert(v.end(), {inf, -inf, std::numeric_limits<T>::quiet_NaN()});
  const auto r = kt::random<T, 1>({random_count}, -40, 40);
  for (index_t i = 0; i < random_count; ++i) v.push_back(r(i));
  tensor<T, 1> t({static_cast<index_t>(v.size())});
  for (std::size_t i = 0; i < v.size(); ++i) t(static_cast<index_t>(i)) = v[i];
  return t;
}

template <class T>
void check_softplus_values(const tensor<T, 1>& x, const tensor<T, 1>& y, double rtol) {
  for (index_t i = 0; i < x.numel(); ++i) {
    const long double want = softplus_ref(x(i));
    CAPTURE(double(x(i)));
    if (std::isnan(double(want))) CHECK(std::isnan(double(y(i))));
    else CHECK(kt::close(double(y(i)), double(want), rtol, std::numeric_limits<T>::min()));  // (exp may flush denormals)
  }
}

}  // namespace

TEST_CASE_TEMPLATE("softplus matches log1p(exp(x)) (x above 20) to a few ulp, on both backends", T, float, double) {
  using X = input<"x", dtype_of<T>, shape<dyn>>;
  const tensor<T, 1> x = softplus_inputs<T>(4096);
  const double rtol = std::is_same_v<T, float> ? 4e-7 : 1e-15;
  check_softplus_values(x, eval(softplus(X{}), {{"x", x}}), rtol);
  check_softplus_values(x, eval(softplus(X{}), {{"x", x}}, eager::backend), rtol);
  // eager-style assignment and a fused chain
  tensor<T, 1> z = softplus(x * T(2)) - x;
  for (index_t i = 0; i < x.numel(); ++i)
    if (std::isfinite(double(x(i))))
      CHECK(kt::close(double(z(i)), double(softplus_ref(2.0L * x(i)) - x(i)), rtol, rtol));
}

TEST_CASE("softplus of integers computes in f32, as PyTorch's") {
  using I = input<"i", i64, shape<dyn>>;
  static_assert(decltype(softplus(I{}))::dt == f32);
  const auto i = kt::random<std::int64_t, 1>({64}, -30, 30);
  const tensor<float, 1> y = eval(softplus(I{}), {{"i", i}});
  for (index_t k = 0; k < 64; ++k) CHECK(kt::close(y(k), double(softplus_ref(i(k))), 4e-7, 0));
}

TEST_CASE("softplus's gradient is sigmoid, in reverse and forward mode, and matches finite differences") {
  using X = input<"x", f64, shape<dyn>>;
  using V = input<"v", f64, shape<dyn>>;
  const tensor<double, 1> x = softplus_inputs<double>(512);
  const index_t n = x.numel();
  const auto v = kt::random<double, 1>({n});
  const tensor<double, 1> g = eval(grad(sum(softplus(X{})), X{}), {{"x", x}});
  const tensor<double, 1> ge = eval(grad(sum(softplus(X{})), X{}), {{"x", x}}, eager::backend);
  const tensor<double, 1> j = eval(jvp(softplus(X{}), tangent(X{}, V{})), {{"x", x}, {"v", v}});
  for (index_t i = 0; i < n; ++i) {
    CAPTURE(x(i));
    if (std::isnan(x(i))) continue;
    const long double want = x(i) > 20 ? 1.0L : sigmoid_ref(x(i));  // PyTorch's: 1 above the threshold
    CHECK(kt::close(g(i), double(want), 1e-14, 0));
    CHECK(kt::close(ge(i), double(want), 1e-14, 0));
    if (std::isfinite(x(i))) CHECK(kt::close(j(i), double(want * v(i)), 1e-14, 1e-300));
    if (std::isfinite(x(i)) && std::fabs(x(i) - 20) > 1e-3) {  // central differences away from the threshold's kink
      const double h = 1e-6 * std::max(1.0, std::fabs(x(i)));
      const double fd = double((softplus_ref(x(i) + h) - softplus_ref(x(i) - h)) / (2 * h));
      CHECK(kt::close(g(i), fd, 1e-6, 1e-12));
    }
  }
}

TEST_CASE("sinh and cosh of f32 near overflow: values and gradients finite where the results are") {
  // e^|x| / 2 fits a float up to |x| = 89.41; the gradient used to form e^|x| on the way
  // (through e^(|x|/2)), infinite from |x| = 88.72
  using X = input<"x", f32, shape<6>>;
  const tensor<float, 1> x({6}, {88.8f, -89.0f, 89.4f, 20.5f, -3.0f, 90.0f});
  const auto check = [&](auto e, auto value_of, auto slope_of) {
    const auto y = eval(e, X{} = x);
    const auto dy = eval(grad(sum(e), X{}), X{} = x);
    for (index_t i = 0; i < 6; ++i) {
      const long double v = x(i), value = value_of(v), slope = slope_of(v);
      CAPTURE(v);
      if (std::fabs(value) > std::numeric_limits<float>::max()) {
        CHECK(std::isinf(y(i)));  // 90: beyond float
        continue;
      }
      CHECK(std::fabs(y(i) - value) <= 2e-7L * std::fabs(value));
      CHECK(std::fabs(dy(i) - slope) <= 2e-7L * std::fabs(slope));
    }
  };
  check(sinh(X{}), [](long double v) { return std::sinh(v); }, [](long double v) { return std::cosh(v); });
  check(cosh(X{}), [](long double v) { return std::cosh(v); }, [](long double v) { return std::sinh(v); });
}
