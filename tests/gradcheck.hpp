// gradcheck: reverse and forward mode of an expression against central finite differences in
// f64, on fresh random inputs, and against each other (<v, J u> = <J^T v, u>). gradcheck_as
// checks the derivatives computed in f32 or bf16 against the differences of the f64 expression.
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

/// An f64 tensor's values rounded to dtype d (still f64): what a tensor of dtype d can hold.
inline kiln::any_tensor rounded(const kiln::any_tensor& t, kiln::dtype d) {
  if (d == t.dt()) return t;
  kiln::any_tensor low(d, t.shape()), back(t.dt(), t.shape());
  low.copy_from(t);
  back.copy_from(low);
  return back;
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

/// Evaluates e (eager), binding only the feeds whose names e's graph has, a floating feed
/// converted to its placeholder's floating dtype.
template <class E>
kiln::any_tensor run(const E& e, const std::vector<kiln::feed>& feeds) {
  std::vector<kiln::feed> used;
  for (const auto& f : feeds)
    for (const kiln::node& n : kiln::traced<E>::value.nodes)
      if ((n.o == kiln::op::input || n.o == kiln::op::param) && n.label() == f.name) {
        used.push_back(f);
        if (n.dt != f.value.dt() && kiln::is_floating(n.dt) && kiln::is_floating(f.value.dt())) {
          used.back().value = kiln::any_tensor(n.dt, f.value.shape());
          used.back().value.copy_from(f.value);
        }
        break;
      }
  return kiln::eval_all(e, std::span<const kiln::feed>(used))[0];
}

struct grad_tolerance {
  double rtol = 1e-6, atol = 1e-6;
  double h = 1e-6;         ///< finite-difference step
  double adjoint = 1e-10;  ///< <v, J u> = <J^T v, u> within adjoint * (1 + sum of |terms|)
};

/// Evaluates one expression on a set of feeds, as plain f64 values.
using evaluator = std::function<std::vector<double>(const std::vector<kiln::feed>&)>;

template <class E>
evaluator evaluate(const E& e) {
  return [e](const std::vector<kiln::feed>& f) { return values(run(e, f)); };
}

/// The checks for one input x (not a template: compiled once). y and loss are evaluated in f64;
/// grad and jvp in dtype dt, to which u is rounded.
inline void check_input(const evaluator& y, const evaluator& loss, const evaluator& grad, const evaluator& jvp,
                        const std::vector<kiln::feed>& base, const std::string& label, std::string_view u_name,
                        const std::vector<double>& rv, kiln::dtype dt, grad_tolerance tol) {
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
  const any_tensor u = rounded(random_f64(xv->shape()), dt);
  const std::vector<double> jv = jvp(with(base, u_name, u));
  const std::vector<double> uv = values(u);
  any_tensor plus = xv->clone(), minus = xv->clone();
  for (index_t i = 0; i < xv->numel(); ++i) {
    f64_data(plus)[i] += tol.h * uv[static_cast<std::size_t>(i)];
    f64_data(minus)[i] -= tol.h * uv[static_cast<std::size_t>(i)];
  }
  const std::vector<double> yp = y(with(base, label, plus)), ym = y(with(base, label, minus));
  REQUIRE(jv.size() == yp.size());
  double vju = 0, jtvu = 0, scale = 1;
  for (std::size_t k = 0; k < jv.size(); ++k) {
    const double fd = (yp[k] - ym[k]) / (2 * tol.h);
    INFO("d y[" << k << "] / d " << label << " along u: forward " << jv[k] << ", finite difference " << fd);
    CHECK(close(jv[k], fd, tol.rtol, tol.atol));
    vju += rv[k] * jv[k];
    scale += std::fabs(rv[k] * jv[k]);
  }
  for (std::size_t k = 0; k < uv.size(); ++k) jtvu += g[k] * uv[k];
  INFO("<v, J u> = " << vju << ", <J^T v, u> = " << jtvu << " for " << label);
  CHECK(close(vju, jtvu, tol.adjoint, tol.adjoint * scale));
}

namespace detail {
/// The derivatives of y (in its dtype) with respect to X... against central differences of y64,
/// the same expression in f64; the point, r and u rounded to y's dtype so that both see them.
template <class... X, class Y, class Y64>
void gradcheck_of(const Y& y, const Y64& y64, std::vector<kiln::feed> feeds, grad_tolerance tol) {
  using namespace kiln;
  constexpr dtype d = Y::dt;
  static_assert(is_floating(d) && Y64::dt == dtype::f64, "gradcheck: y in a floating dtype, y64 in f64");
  for (auto& f : feeds)
    if (f.value.dt() == dtype::f64) f.value = rounded(f.value, d);
  const any_tensor r = rounded(random_f64(run(y64, feeds).shape()), d);  // the run-time shape (dyn)
  const std::vector<feed> base = with(feeds, "r_", r);
  const auto loss = sum(y * input<"r_", d, as_shape<Y::shape>>{});
  const evaluator ye = evaluate(y64), le = evaluate(sum(y64 * input<"r_", dtype::f64, as_shape<Y64::shape>>{}));
  auto one = [&]<class XP, int I>() {
    using U = input<fixed_string<3>(indexed_name<I>), d, as_shape<XP::shape>>;
    check_input(ye, le, evaluate(grad(loss, XP{})), evaluate(jvp(y, tangent(XP{}, U{}))), base,
                std::string(XP::make().label()), U::make().label(), values(r), d, tol);
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (one.template operator()<X, static_cast<int>(I)>(), ...);
  }(std::index_sequence_for<X...>{});
}
}  // namespace detail

/// Checks d sum(y * r) / d x (reverse mode) and d y / d x along u (forward mode) for each
/// placeholder type in X..., against central differences of the eager evaluation of y, and
/// reverse against forward mode. `feeds` binds every placeholder of y (f64 values).
template <class... X, class Y>
void gradcheck(const Y& y, const std::vector<kiln::feed>& feeds, grad_tolerance tol = {}) {
  static_assert(Y::dt == kiln::dtype::f64, "gradcheck runs in f64 (gradcheck_as: in a lower precision)");
  detail::gradcheck_of<X...>(y, y, feeds, tol);
}

/// Tolerances of derivatives computed in f32 and bf16: rtol from the precision's resolution,
/// atol from sums of rounded terms that cancel (in bf16, terms up to about 8 with an ulp of 2^-7
/// relative, for results of order 1).
inline constexpr grad_tolerance f32_tolerance{.rtol = 1e-3, .atol = 1e-5, .adjoint = 1e-5};
inline constexpr grad_tolerance bf16_tolerance{.rtol = 2e-2, .atol = 5e-2, .adjoint = 3e-2};

/// The same checks of derivatives computed in dtype D, against central differences in f64:
/// f is a lambda []<kiln::dtype T>() { return ...; } that builds the expression in dtype T from
/// the placeholder templates X<T>...; `feeds` are f64 values, rounded to D.
template <kiln::dtype D, template <kiln::dtype> class... X, class F>
void gradcheck_as(const F& f, const std::vector<kiln::feed>& feeds,
                  grad_tolerance tol = D == kiln::dtype::bf16 ? bf16_tolerance : f32_tolerance) {
  detail::gradcheck_of<X<D>...>(f.template operator()<D>(), f.template operator()<kiln::dtype::f64>(), feeds, tol);
}

}  // namespace kt
