// kiln/nn/modules.hpp: models as compile-time definitions that compose, and their parameters.
//
//   using net = nn::mlp<"mlp", 784, 256, 128, 10>;     // linear(784,256) relu linear relu linear
//   auto x = input<"x", f32, shape<dyn, 784>>{};
//   auto logits = net{}(x);                             // an expression: net's params are placeholders
//   auto params = nn::make_params<net>(/*seed=*/1);    // nn::param_set<net::params>
//   auto y = eval(logits, decltype(x){} = xv, params);  // bound by type, checked at compile time
//   params.get<nn::linear<"mlp.0", 784, 256>::weight>(); // one parameter's tensor<float, 2>
//   nn::state_dict sd = params;                          // "mlp.0.weight" -> tensor (checkpoints)
//
// A module is a type with
//   using params = std::tuple<param<...>...>;          its parameters (placeholder types)
//   constexpr auto operator()(const X& x) const;        the expression it computes from x
//   static void init(state_dict&, std::uint64_t seed);  PyTorch's default initial values
// The parameter set of a model is known at compile time (names, dtypes, shapes: the tuple); its
// tensors live in an nn::param_set, one per parameter type, which converts to and from a
// state_dict (tensors by name, what safetensors files hold; the names are run-time data there).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../eval.hpp"
#include "../graph/expr_derived_nn.hpp"
#include "init.hpp"

namespace kiln::nn {

/// Tensors by name: a model's parameters, an optimizer's state (the type of io::tensor_map).
using state_dict = std::map<std::string, any_tensor>;

/// A model's parameters by type: one tensor for each parameter type of the tuple Params (a
/// model's ::params), reached with get<W>() and usable as one argument of eval, compile and
/// the trainer (`eval(logits, X{} = x, params)`). It converts to a state_dict, and is made
/// from one, sharing the tensors' storage.
template <class Params>
using param_set = tensor_set<Params>;

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

/// Tag selecting a module's training-mode forward (dropout active): `net{}(x, nn::train)`.
/// Without it, a module computes its inference forward (dropout is the identity), so the
/// training step and the evaluation of one model are two expressions, each its own plan.
struct training_t {
  explicit constexpr training_t() = default;
};
inline constexpr training_t train{};

/// torch.nn.Conv2d (square stride and padding): weight [Out, In / Groups, K, K] named
/// "<Name>.weight" and bias [Out] named "<Name>.bias", both uniform in +-1/sqrt(In / Groups K K)
/// as PyTorch initialises them. Input [n, In, h, w] -> [n, Out, ho, wo].
template <fixed_string Name, index_t In, index_t Out, index_t K, index_t Stride = 1, index_t Padding = 0,
          dtype D = dtype::f32, index_t Groups = 1>
struct conv2d {
  static_assert(In > 0 && Out > 0 && K > 0, "kiln: nn::conv2d needs static, positive channels and kernel");
  static_assert(Groups > 0 && In % Groups == 0 && Out % Groups == 0,
                "kiln: nn::conv2d's groups must divide its input and output channels");
  using weight = param<Name + ".weight", D, shape<Out, In / Groups, K, K>>;
  using bias = param<Name + ".bias", D, shape<Out>>;
  using params = std::tuple<weight, bias>;

  template <tensor_operand X>
  constexpr auto operator()(const X& x) const {
    return kiln::conv2d<Stride, Padding, 1, Groups>(x, weight{}, bias{});
  }
  static void init(state_dict& sd, std::uint64_t seed) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(In / Groups * K * K));
    init::uniform(sd.at(std::string(weight::name.view())), -bound, bound, seed, stream_of(weight::name.view()));
    init::uniform(sd.at(std::string(bias::name.view())), -bound, bound, seed, stream_of(bias::name.view()));
  }
};

/// torch.nn.Embedding: weight [Num, Dim] named "<Name>.weight", normal(0, 1) as PyTorch
/// initialises it; integer indices [...] -> [..., Dim].
template <fixed_string Name, index_t Num, index_t Dim, dtype D = dtype::f32>
struct embedding {
  static_assert(Num > 0 && Dim > 0, "kiln: nn::embedding needs static, positive extents");
  using weight = param<Name + ".weight", D, shape<Num, Dim>>;
  using params = std::tuple<weight>;

  template <tensor_operand I>
  constexpr auto operator()(const I& index) const {
    return kiln::embedding(index, weight{});
  }
  static void init(state_dict& sd, std::uint64_t seed) {
    init::normal(sd.at(std::string(weight::name.view())), 0.0, 1.0, seed, stream_of(weight::name.view()));
  }
};

/// torch.nn.Dropout with p = Num / Den (nn::dropout<"drop", 20> drops 20%): in training mode
/// each element is zeroed with probability p and the others scaled by 1 / (1 - p), the mask
/// drawn from the run's seed (kiln::seed_input, fed by optim::trainer at each step) and the
/// stream of Name; in inference mode it is the identity.
template <fixed_string Name, index_t Num, index_t Den = 100>
struct dropout {
  static_assert(Den > 0 && Num >= 0 && Num < Den, "kiln: nn::dropout needs 0 <= Num / Den < 1");
  static constexpr double p = static_cast<double>(Num) / static_cast<double>(Den);
  using params = std::tuple<>;

  template <tensor_operand X>
  constexpr auto operator()(const X& x) const {
    return as_expr(x);
  }
  template <tensor_operand X>
  constexpr auto operator()(const X& x, training_t) const {
    return kiln::dropout<Name, Num, Den>(x, seed_input{});
  }
  static void init(state_dict&, std::uint64_t) {}
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
template <index_t K, index_t S>
struct max_pool2d_fn {
  template <class X> constexpr auto operator()(const X& x) const { return kiln::max_pool2d<K, S>(x); }
};
template <index_t K, index_t S>
struct avg_pool2d_fn {
  template <class X> constexpr auto operator()(const X& x) const { return kiln::avg_pool2d<K, S>(x); }
};
template <pool2d_options O>
struct max_pool2d_with_fn {
  template <class X> constexpr auto operator()(const X& x) const { return kiln::max_pool2d<O>(x); }
};
template <pool2d_options O>
struct avg_pool2d_with_fn {
  template <class X> constexpr auto operator()(const X& x) const { return kiln::avg_pool2d<O>(x); }
};
/// [n, ...] -> [n, product of the rest] (the rest static).
struct flatten_fn {
  template <class X>
  constexpr auto operator()(const X& x) const {
    using E = decltype(as_expr(x));
    constexpr bool ok = [] {
      for (int i = 1; i < E::shape.rank; ++i)
        if (E::shape.e[i] == dyn) return false;
      return E::shape.rank >= 2;
    }();
    static_assert(ok, "kiln: nn::flatten needs [n, ...] of rank >= 2 with static extents after the first");
    constexpr index_t rest = [] {
      index_t r = 1;
      for (int i = 1; i < E::shape.rank; ++i) r *= E::shape.e[i];
      return r;
    }();
    return kiln::reshape<dyn, rest>(x);
  }
};
}  // namespace detail
using relu = activation<detail::relu_fn>;
using gelu = activation<detail::gelu_fn>;
using silu = activation<detail::silu_fn>;
using tanh = activation<detail::tanh_fn>;
/// torch.nn.MaxPool2d and AvgPool2d (square windows, stride defaults to the kernel).
template <index_t K, index_t S = K>
using max_pool2d = activation<detail::max_pool2d_fn<K, S>>;
template <index_t K, index_t S = K>
using avg_pool2d = activation<detail::avg_pool2d_fn<K, S>>;
/// torch.nn.MaxPool2d and AvgPool2d with all of PyTorch's arguments:
/// nn::max_pool2d_with<pool2d_options{.kernel = 3, .stride = 2, .ceil_mode = true}>.
template <pool2d_options O>
using max_pool2d_with = activation<detail::max_pool2d_with_fn<O>>;
template <pool2d_options O>
using avg_pool2d_with = activation<detail::avg_pool2d_with_fn<O>>;
/// torch.nn.Flatten: [n, c, h, w] -> [n, c h w].
using flatten = activation<detail::flatten_fn>;

/// Modules applied in order (torch.nn.Sequential).
template <class... M>
struct sequential {
  using params = params_of<M...>;

  template <tensor_operand X>
  constexpr auto operator()(const X& x) const {
    return apply<false, M...>(x);
  }
  /// The training-mode forward: modules that have one (dropout) use it.
  template <tensor_operand X>
  constexpr auto operator()(const X& x, training_t) const {
    return apply<true, M...>(x);
  }
  static void init(state_dict& sd, std::uint64_t seed) { (M::init(sd, seed), ...); }

 private:
  template <bool Train, class Mod, class X>
  static constexpr auto call(const X& x) {
    if constexpr (Train && requires { Mod{}(x, train); }) return Mod{}(x, train);
    else return Mod{}(x);
  }
  template <bool Train, class First, class... Rest, class X>
  static constexpr auto apply(const X& x) {
    if constexpr (sizeof...(Rest) == 0) return call<Train, First>(x);
    else return apply<Train, Rest...>(call<Train, First>(x));
  }
};

namespace detail {
template <class Seq, class... M>
struct append;
template <class... S, class... M>
struct append<sequential<S...>, M...> {
  using type = sequential<S..., M...>;
};
/// The MLP's name as a type (see mlp).
template <fixed_string Name>
struct name_tag {
  static constexpr auto value = Name;
};
/// The name of layer I.
template <class N, std::size_t I>
inline constexpr auto layer_name = N::value + "." + digits<I>();
/// Layers I.. of an MLP named N with widths W: linear N.I, then Act unless it is the last.
template <class N, class Act, dtype D, std::size_t I, index_t... W>
struct mlp_layers;
template <class N, class Act, dtype D, std::size_t I, index_t A, index_t B>
struct mlp_layers<N, Act, D, I, A, B> {
  using type = sequential<linear<layer_name<N, I>, A, B, D>>;
};
template <class N, class Act, dtype D, std::size_t I, index_t A, index_t B, index_t C, index_t... W>
struct mlp_layers<N, Act, D, I, A, B, C, W...> {
  using type = typename append<sequential<linear<layer_name<N, I>, A, B, D>, Act>,
                               typename mlp_layers<N, Act, D, I + 1, B, C, W...>::type>::type;
};
template <class... S, class... T>
struct append<sequential<S...>, sequential<T...>> {
  using type = sequential<S..., T...>;
};
}  // namespace detail

/// A multi-layer perceptron with these widths (input first, output last) and relu between
/// layers: mlp<"mlp", 784, 256, 10> is linear "mlp.0" (784 -> 256), relu, linear "mlp.1".
/// A class of its own, not an alias of that sequential, with params its own member: cudafe++
/// (nvcc) spells a type reached through the sequential with mlp's Name unresolved, which the host
/// compiler then rejects; mlp<...>::params it spells as it is.
template <fixed_string Name, index_t... Widths>
  requires(sizeof...(Widths) >= 2)
struct mlp : detail::mlp_layers<detail::name_tag<Name>, relu, dtype::f32, 0, Widths...>::type {
  using params = typename mlp::sequential::params;
};

/// The same with another activation and dtype: mlp_with<"net", nn::gelu, f64, 8, 16, 4>.
template <fixed_string Name, class Act, dtype D, index_t... Widths>
  requires(sizeof...(Widths) >= 2)
struct mlp_with : detail::mlp_layers<detail::name_tag<Name>, Act, D, 0, Widths...>::type {
  using params = typename mlp_with::sequential::params;
};

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

/// A model's parameters with the initial values of its modules, reproducible by seed (it
/// converts to a state_dict where one is wanted).
template <class Model>
param_set<typename Model::params> make_params(std::uint64_t seed) {
  param_set<typename Model::params> ps;
  state_dict sd = ps;  // the same tensors, by name
  Model::init(sd, seed);
  return ps;
}

/// Feeds by name that own their names: what nn::feeds returns, taken wherever a
/// std::span<const feed> is (eval, compile, the trainer's string forms).
class named_feeds {
 public:
  named_feeds(const state_dict& sd, std::initializer_list<feed> extra) {
    for (const feed& f : extra) add(f.name, f.value);
    for (const auto& [name, t] : sd) add(name, t);
  }
  named_feeds(named_feeds&&) noexcept = default;
  named_feeds& operator=(named_feeds&&) noexcept = default;
  named_feeds(const named_feeds&) = delete;  // the feeds point into names_
  named_feeds& operator=(const named_feeds&) = delete;

  std::span<const feed> span() const { return feeds_; }
  operator std::span<const feed>() const { return feeds_; }  // NOLINT: where feeds are taken
  std::size_t size() const { return feeds_.size(); }

 private:
  void add(std::string_view name, const any_tensor& t) {
    names_.emplace_back(name);  // a deque: earlier names stay where they are
    feeds_.push_back({names_.back(), t});
  }
  std::deque<std::string> names_;
  std::vector<feed> feeds_;
};

/// Feeds binding every tensor of the state dict by name, after `extra` (the inputs), for
/// names that are run-time data; the feeds own their names. With the names known at compile
/// time, bind by type instead: `eval(y, X{} = x, params)` with an nn::param_set.
inline named_feeds feeds(const state_dict& sd, std::initializer_list<feed> extra = {}) { return {sd, extra}; }

/// The number of elements of a parameter tuple.
template <class Params>
constexpr index_t parameter_count() {
  return std::apply([](auto... p) { return (index_t{0} + ... + decltype(p)::shape.numel()); }, Params{});
}

}  // namespace kiln::nn
