// kiln/nn/modules.hpp: models as compile-time definitions that compose, and their parameters.
//
//   using net = nn::mlp<"mlp", 784, 256, 128, 10>;     // linear(784,256) relu linear relu linear
//   auto x = input<"x", f32, shape<dyn, 784>>{};
//   auto logits = net{}(x);                             // an expression: net's params are placeholders
//   nn::state_dict params = nn::make_params<net>(/*seed=*/1);   // "mlp.0.weight" -> tensor ...
//   auto y = eval(logits, nn::feeds(params, {{"x", xv}}));
//
// A module is a type with
//   using params = std::tuple<param<...>...>;          its parameters (placeholder types)
//   constexpr auto operator()(const X& x) const;        the expression it computes from x
//   static void init(state_dict&, std::uint64_t seed);  PyTorch's default initial values
// The parameter set of a model is known at compile time (names, dtypes, shapes: the tuple) and
// lives at run time in a state_dict, tensors by name, which is what safetensors files hold.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../eval.hpp"
#include "init.hpp"

namespace kiln::nn {

/// Tensors by name: a model's parameters, an optimizer's state (the type of io::tensor_map).
using state_dict = std::map<std::string, any_tensor>;

/// The parameter tuples of several modules, concatenated.
template <class... M>
using params_of = decltype(std::tuple_cat(std::declval<typename M::params>()...));

/// torch.nn.Linear: y = x W^T + b, with W [Out, In] named "<Name>.weight" and b [Out] named
/// "<Name>.bias", both initialised uniform in +-1/sqrt(In) as PyTorch does.
template <fixed_string Name, index_t In, index_t Out, dtype D = dtype::f32>
struct linear {
  static_assert(In > 0 && Out > 0, "kiln: nn::linear needs static, positive extents");
  using weight = param<Name + ".weight", D, shape<Out, In>>;
  using bias = param<Name + ".bias", D, shape<Out>>;
  using params = std::tuple<weight, bias>;

  template <tensor_operand X>
  constexpr auto operator()(const X& x) const {
    return kiln::linear(x, weight{}, bias{});
  }
  static void init(state_dict& sd, std::uint64_t seed) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(In));
    init::uniform(sd.at(std::string(weight::name.view())), -bound, bound, seed, stream_of(weight::name.view()));
    init::uniform(sd.at(std::string(bias::name.view())), -bound, bound, seed, stream_of(bias::name.view()));
  }
};

/// A function with no parameters as a module.
template <class F>
struct activation {
  using params = std::tuple<>;
  template <tensor_operand X>
  constexpr auto operator()(const X& x) const {
    return F{}(x);
  }
  static void init(state_dict&, std::uint64_t) {}
};
namespace detail {
struct relu_fn {
  template <class X> constexpr auto operator()(const X& x) const { return kiln::relu(x); }
};
struct gelu_fn {
  template <class X> constexpr auto operator()(const X& x) const { return kiln::gelu(x); }
};
struct silu_fn {
  template <class X> constexpr auto operator()(const X& x) const { return kiln::silu(x); }
};
struct tanh_fn {
  template <class X> constexpr auto operator()(const X& x) const { return kiln::tanh(x); }
};
}  // namespace detail
using relu = activation<detail::relu_fn>;
using gelu = activation<detail::gelu_fn>;
using silu = activation<detail::silu_fn>;
using tanh = activation<detail::tanh_fn>;

/// Modules applied in order (torch.nn.Sequential).
template <class... M>
struct sequential {
  using params = params_of<M...>;

  template <tensor_operand X>
  constexpr auto operator()(const X& x) const {
    return apply<M...>(x);
  }
  static void init(state_dict& sd, std::uint64_t seed) { (M::init(sd, seed), ...); }

 private:
  template <class First, class... Rest, class X>
  static constexpr auto apply(const X& x) {
    if constexpr (sizeof...(Rest) == 0) return First{}(x);
    else return apply<Rest...>(First{}(x));
  }
};

namespace detail {
template <class Seq, class... M>
struct append;
template <class... S, class... M>
struct append<sequential<S...>, M...> {
  using type = sequential<S..., M...>;
};
/// Layers I.. of an MLP with widths W: linear Name.I, then Act unless it is the last.
template <fixed_string Name, class Act, std::size_t I, index_t... W>
struct mlp_layers;
template <fixed_string Name, class Act, std::size_t I, index_t A, index_t B>
struct mlp_layers<Name, Act, I, A, B> {
  template <dtype D>
  using type = sequential<linear<Name + "." + digits<I>(), A, B, D>>;
};
template <fixed_string Name, class Act, std::size_t I, index_t A, index_t B, index_t C, index_t... W>
struct mlp_layers<Name, Act, I, A, B, C, W...> {
  template <dtype D>
  using type = typename append<sequential<linear<Name + "." + digits<I>(), A, B, D>, Act>,
                               typename mlp_layers<Name, Act, I + 1, B, C, W...>::template type<D>>::type;
};
template <class... S, class... T>
struct append<sequential<S...>, sequential<T...>> {
  using type = sequential<S..., T...>;
};
}  // namespace detail

/// A multi-layer perceptron with these widths (input first, output last) and relu between
/// layers: mlp<"mlp", 784, 256, 10> is linear "mlp.0" (784 -> 256), relu, linear "mlp.1".
template <fixed_string Name, index_t... Widths>
  requires(sizeof...(Widths) >= 2)
using mlp = typename detail::mlp_layers<Name, relu, 0, Widths...>::template type<dtype::f32>;

/// The same with another activation and dtype: mlp_with<"net", nn::gelu, f64, 8, 16, 4>.
template <fixed_string Name, class Act, dtype D, index_t... Widths>
  requires(sizeof...(Widths) >= 2)
using mlp_with = typename detail::mlp_layers<Name, Act, 0, Widths...>::template type<D>;

/// Zero tensors for the placeholders of tuple Params (static shapes), by name.
template <class Params>
state_dict zeros_for() {
  state_dict sd;
  std::apply(
      [&](auto... p) {
        ((sd[std::string(decltype(p)::name.view())] = any_tensor(decltype(p)::dt, decltype(p)::shape)), ...);
      },
      Params{});
  return sd;
}

/// A model's parameters with the initial values of its modules, reproducible by seed.
template <class Model>
state_dict make_params(std::uint64_t seed) {
  state_dict sd = zeros_for<typename Model::params>();
  Model::init(sd, seed);
  return sd;
}

/// Feeds binding every tensor of the state dicts by name, after `extra` (the inputs). The
/// feeds refer to the dicts' names: keep the dicts alive while they are used.
inline std::vector<feed> feeds(const state_dict& sd, std::initializer_list<feed> extra = {}) {
  std::vector<feed> f(extra);
  for (const auto& [name, t] : sd) f.push_back({name, t});
  return f;
}

/// The number of elements of a parameter tuple.
template <class Params>
constexpr index_t parameter_count() {
  return std::apply([](auto... p) { return (index_t{0} + ... + decltype(p)::shape.numel()); }, Params{});
}

}  // namespace kiln::nn
