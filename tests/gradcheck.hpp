// gradcheck: reverse and forward mode of an expression against central finite differences in
// f64, on fresh random inputs, and against each other (<v, J u> = <J^T v, u>).
#pragma once

#include "support.hpp"

#include <functional>
#include <string>
#include <vector>

namespace kt {

/// A placeholder name with an index: "u0", "u1", ...
template <int I>
inline constexpr char indexed_name[3] = {'u', static_cast<char>('0' + I), 0};

/// A plain copy of a tensor's values (f64), in row-major order.
inline std::vector<double> values(const kiln::any_tensor& t) { return values_of(t); }

inline double* f64_data(kiln::any_tensor& t) { return reinterpret_cast<double*>(t.bytes()); }

inline kiln::any_tensor random_f64(const kiln::dims& s, double lo = -2, double hi = 2) {
  return random_tensor(kiln::dtype::f64, s, lo, hi);
}

/// Feeds with one value replaced (by name).
inline std::vector<kiln::feed> with(std::vector<kiln::feed> feeds, std::string_view name, const kiln::any_tensor& v) {
  bool found = false;
  for (auto& f : feeds)
    if (f.name == name) {
      f.value = v;
      found = true;
    }
  if (!found) feeds.push_back({name, v});
  return feeds;
}

/// Evaluates e (eager), binding only the feeds whose names e's graph has.
template <class E>
kiln::any_tensor run(const E& e, const std::vector<kiln::feed>& feeds) {
  std::vector<kiln::feed> used;
  for (const auto& f : feeds)
    for (const kiln::node& n : kiln::traced<E>::value.nodes)
      if ((n.o == kiln::op::input || n.o == kiln::op::param) && n.label() == f.name) {
        used.push_back(f);
        break;
      }
  return kiln::eval_all(e, std::span<const kiln::feed>(used))[0];
}

struct grad_tolerance {
  double rtol = 1e-6, atol = 1e-6;
  double h = 1e-6;  ///< finite-difference step
};

/// Evaluates one expression on a set of feeds, as plain f64 values.
using evaluator = std::function<std::vector<double>(const std::vector<kiln::feed>&)>;

template <class E>
evaluator evaluate(const E& e) {
  return [e](const std::vector<kiln::feed>& f) { return values(run(e, f)); };
}

/// The checks for one input x (not a template: compiled once).
inline void check_input(const evaluator& y, const evaluator& loss, const evaluator& grad, const evaluator& jvp,
                        const std::vector<kiln::feed>& base, const std::string& label, std::string_view u_name,
                        const std::vector<double>& rv, grad_tolerance tol) {
  using namespace kiln;
  const any_tensor* xv = nullptr;
  for (const auto& f : base)
    if (f.name == label) xv = &f.value;
  REQUIRE(xv != nullptr);
  // reverse mode against central differences of the loss
  const std::vector<double> g = grad(base);
  REQUIRE(static_cast<index_t>(g.size()) == xv->numel());
  for (index_t i = 0; i < xv->numel(); ++i) {
    any_tensor plus = xv->clone(), minus = xv->clone();
    f64_data(plus)[i] += tol.h;
    f64_data(minus)[i] -= tol.h;
    const double fd = (loss(with(base, label, plus))[0] - loss(with(base, label, minus))[0]) / (2 * tol.h);
    INFO("d loss / d " << label << "[" << i << "]: reverse " << g[static_cast<std::size_t>(i)] << ", finite difference " << fd);
    CHECK(close(g[static_cast<std::size_t>(i)], fd, tol.rtol, tol.atol));
  }
  // forward mode along a random u, against central differences of y
  const any_tensor u = random_f64(xv->shape());
  const std::vector<double> jv = jvp(with(base, u_name, u));
  const std::vector<double> uv = values(u);
  any_tensor plus = xv->clone(), minus = xv->clone();
  for (index_t i = 0; i < xv->numel(); ++i) {
    f64_data(plus)[i] += tol.h * uv[static_cast<std::size_t>(i)];
    f64_data(minus)[i] -= tol.h * uv[static_cast<std::size_t>(i)];
  }
  const std::vector<double> yp = y(with(base, label, plus)), ym = y(with(base, label, minus));
  REQUIRE(jv.size() == yp.size());
  double vju = 0, jtvu = 0;
  for (std::size_t k = 0; k < jv.size(); ++k) {
    const double fd = (yp[k] - ym[k]) / (2 * tol.h);
    INFO("d y[" << k << "] / d " << label << " along u: forward " << jv[k] << ", finite difference " << fd);
    CHECK(close(jv[k], fd, tol.rtol, tol.atol));
    vju += rv[k] * jv[k];
  }
  for (std::size_t k = 0; k < uv.size(); ++k) jtvu += g[k] * uv[k];
  INFO("<v, J u> = " << vju << ", <J^T v, u> = " << jtvu << " for " << label);
  CHECK(close(vju, jtvu, 1e-10, 1e-10));
}

/// Checks d sum(y * r) / d x (reverse mode) and d y / d x along u (forward mode) for each
/// placeholder type in X..., against central differences of the eager evaluation of y, and
/// reverse against forward mode. `feeds` binds every placeholder of y (f64 values).
template <class... X, class Y>
void gradcheck(const Y& y, const std::vector<kiln::feed>& feeds, grad_tolerance tol = {}) {
  using namespace kiln;
  static_assert(Y::dt == dtype::f64, "gradcheck runs in f64");
  using R = input<"r_", dtype::f64, as_shape<Y::shape>>;
  const any_tensor r = random_f64(Y::shape);
  const std::vector<feed> base = with(feeds, "r_", r);
  const auto loss = sum(y * R{});
  const evaluator ye = evaluate(y), le = evaluate(loss);
  auto one = [&]<class XP, int I>() {
    using U = input<fixed_string<3>(indexed_name<I>), dtype::f64, as_shape<XP::shape>>;
    check_input(ye, le, evaluate(grad(loss, XP{})), evaluate(jvp(y, tangent(XP{}, U{}))), base,
                std::string(XP::make().label()), U::make().label(), values(r), tol);
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (one.template operator()<X, static_cast<int>(I)>(), ...);
  }(std::index_sequence_for<X...>{});
}

}  // namespace kt
