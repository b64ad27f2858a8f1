// What the conformance writers share (tests/conformance): each case evaluates one expression
// on the CPU backend and stores, under "<case>.<what>", its inputs, its value (and the eager
// backend's, "value_eager"), the gradient of
// sum(value * g) with respect to each differentiable input for a random cotangent g, and the
// forward-mode derivative along random tangents of those inputs (derivative_backend says on
// which backend); check_ops.py computes the same with PyTorch and compares. The metadata
// "case.<name>" lists the case's inputs, which of them are differentiated and where
// ("inputs=a,b;diff=a;derivatives=cpu").
#pragma once

#include <kiln/kiln.hpp>
#include <kiln/io/safetensors.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kc {

using namespace kiln;

struct store {
  io::tensor_map tensors;
  io::metadata_map metadata;
  std::mt19937_64 gen;
};

/// Uniform values in [lo, hi), then the edge values given, in order, over the first elements.
inline any_tensor uniform(store& s, dtype dt, dims shape, double lo, double hi, std::vector<double> edges = {}) {
  any_tensor t(dt, shape);
  std::uniform_real_distribution<double> u(lo, hi);
  for (index_t i = 0; i < t.numel(); ++i) {
    const double v = i < static_cast<index_t>(edges.size()) ? edges[static_cast<std::size_t>(i)] : u(s.gen);
    if (dt == dtype::f32) t.data<float>()[i] = static_cast<float>(v);
    else if (dt == dtype::f64) t.data<double>()[i] = v;
    else if (dt == dtype::i64) t.data<std::int64_t>()[i] = static_cast<std::int64_t>(std::floor(v));
    else if (dt == dtype::i32) t.data<std::int32_t>()[i] = static_cast<std::int32_t>(std::floor(v));
    else if (dt == dtype::boolean) t.data<bool>()[i] = v >= 0.5;
  }
  return t;
}

/// Edge values of floating point: +-0, the tiny and the huge, +-inf, NaN, and around 1.
inline std::vector<double> float_edges() {
  const double inf = std::numeric_limits<double>::infinity();
  return {0.0, -0.0, 1e-7, -1e-7, 1e-30, -1e-30, 1.0, -1.0, 0.5, -0.5, 20.0, -20.0, 50.0, -50.0,
          89.0, -89.0, 1e30, -1e30, inf, -inf, std::numeric_limits<double>::quiet_NaN()};
}

/// The tangent placeholder of differentiated input P (position I): "t0", "t1", ...
template <std::size_t I>
constexpr fixed_string<3> tangent_name() {
  fixed_string<3> f;
  f.chars[0] = 't';
  f.chars[1] = static_cast<char>('0' + I);
  return f;
}
template <std::size_t I, class P>
using tangent_of = input<tangent_name<I>(), P::dt, as_shape<P::shape>>;

template <class Y, class... P, std::size_t... I>
auto jvp_of(const Y& y, std::index_sequence<I...>) {
  return jvp(y, tangent(P{}, tangent_of<I, P>{})...);
}

/// The backend that computes a case's derivatives: the CPU backend in f32 (what models train
/// with), the eager reference in f64, where the suite checks the derivative rules themselves.
/// A derivative plan on the CPU backend is most of a case's compile time (cases_nn_f64.cpp:
/// 65 s at g++ -O0 with its derivatives on the CPU backend, 26 s on the eager one); the CPU
/// backend's f64 derivatives are checked against finite differences by the gradcheck tests and
/// against the eager backend by test_cpu_random_grad.
template <dtype D>
using derivative_backend = std::conditional_t<D == dtype::f64, eager::backend_t, default_backend>;

/// Records case `name`: y's value on `inputs` (name, tensor; all of y's placeholders), and for
/// each of the placeholders P... (differentiable inputs) the gradient and the tangent.
template <class... P, class Y>
void record(store& s, const std::string& name, const Y& y, const std::vector<std::pair<std::string, any_tensor>>& inputs) {
  std::vector<feed> feeds;
  std::string names;
  for (const auto& [n, t] : inputs) {
    s.tensors[name + "." + n] = t;
    feeds.push_back({n, t});
    names += (names.empty() ? "" : ",") + n;
  }
  const any_tensor value = eval_all(y, std::span<const feed>(feeds))[0];
  s.tensors[name + ".value"] = value;
  s.tensors[name + ".value_eager"] = eval_all(y, std::span<const feed>(feeds), eager::backend)[0];
  std::string diff;
  if constexpr (sizeof...(P) > 0) {
    using E = decltype(as_expr(y));
    using G = input<"g", E::dt, as_shape<E::shape>>;
    constexpr derivative_backend<E::dt> on{};
    const any_tensor g = uniform(s, E::dt, value.shape(), -1, 1);
    s.tensors[name + ".g"] = g;
    std::vector<feed> with_g = feeds;
    with_g.push_back({"g", g});
    const auto loss = sum(y * G{});
    ((s.tensors[name + ".grad." + std::string(P::name.view())] =
          eval_all(grad(loss, P{}), std::span<const feed>(with_g), on)[0],
      diff += (diff.empty() ? "" : ",") + std::string(P::name.view())),
     ...);
    std::vector<feed> with_t = feeds;
    // a feed names its placeholder by a string_view: the names live here
    static const std::string tangent_names[] = {"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9"};
    static_assert(sizeof...(P) <= 10);
    std::size_t i = 0;
    ((s.tensors[name + ".t." + std::string(P::name.view())] = uniform(s, P::dt, s.tensors[name + "." + std::string(P::name.view())].shape(), -1, 1),
      with_t.push_back({tangent_names[i++], s.tensors[name + ".t." + std::string(P::name.view())]})),
     ...);
    s.tensors[name + ".jvp"] =
        eval_all(jvp_of<Y, P...>(y, std::index_sequence_for<P...>{}), std::span<const feed>(with_t), on)[0];
  }
  s.metadata["case." + name] = "inputs=" + names + ";diff=" + diff;
  if constexpr (sizeof...(P) > 0)
    s.metadata["case." + name] += std::string(";derivatives=") +
                                  (std::is_same_v<derivative_backend<decltype(as_expr(y))::dt>, eager::backend_t> ? "eager" : "cpu");
}

void pointwise_cases_f32(store& s);
void pointwise_cases_f64(store& s);
void reduction_cases_f32(store& s);
void reduction_cases_f64(store& s);
void shape_cases_f32(store& s);
void shape_cases_f64(store& s);
void core_cases_f32(store& s);
void core_cases_f64(store& s);
void nn_cases_f32(store& s);
void nn_cases_f64(store& s);
void more_cases_f32(store& s);
void more_cases_f64(store& s);
void layer_cases_f32(store& s);
void layer_cases_f64(store& s);
void sort_cases_f32(store& s);
void sort_cases_f64(store& s);
void scan_cases_f32(store& s);
void scan_cases_f64(store& s);
void option_cases_f32(store& s);
void option_cases_f64(store& s);

}  // namespace kc
