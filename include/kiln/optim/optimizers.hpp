// kiln/optim/optimizers.hpp: optimizers as expressions, and a whole training step compiled into
// one plan (run by optim::trainer, optim/trainer.hpp).
//
//   using net = nn::mlp<"mlp", 784, 256, 10>;
//   auto x = input<"x", f32, shape<dyn, 784>>{};
//   auto y = input<"y", i64, shape<dyn>>{};
//   auto loss = cross_entropy(net{}(x), y);
//   optim::trainer tr(loss, net::params{}, optim::adam{.lr = 1e-3}, nn::make_params<net>(seed));
//   double l = tr.step(X{} = xb, Y{} = yb);             // forward, backward, update: one plan
//
// An optimizer is a type with a rule `update(p, g, states...)` that returns the new parameter and
// the new states (a kiln::detail::pack: make_pack(p', states'...), core/pack.hpp) as expressions
// of the parameter p, its gradient g and its state placeholders (SGD's momentum buffer, Adam's
// moments), which `states<P>` lists (a std::tuple of their types). training_step() differentiates the loss, applies the
// rule to every parameter, and returns kiln::outputs(loss, p1', states1'..., p2', ...): one graph,
// so the fusion pass puts each update into the kernel that computes its gradient where it can,
// and the plan holds forward, backward and update together. Hyperparameters are rank-0 inputs
// hyper<D, "lr"> (named "optim.lr.f32") that the trainer binds by type at each step from the
// optimizer's hypers(t), a hyper_values keyed by the same names at compile time (learning-rate
// schedules and Adam's bias corrections change them without recompiling; a rule that reads a
// hyperparameter hypers() does not give is a compile error naming it). The rules follow
// torch.optim's documented algorithms.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../core/pack.hpp"
#include "../eval.hpp"

namespace kiln::optim {

namespace detail {
template <dtype D>
constexpr auto dtype_suffix() {
  constexpr std::string_view n = name(D);
  fixed_string<n.size() + 2> r;
  r.chars[0] = '.';
  for (std::size_t i = 0; i < n.size(); ++i) r.chars[i + 1] = n[i];
  return r;
}
}  // namespace detail

/// Hyperparameter H for parameters of dtype D: a rank-0 input of dtype D named "optim.H.D"
/// ("optim.lr.f32"), which the trainer binds to the value of H in the optimizer's hypers(t),
/// rounded to D. Typed inputs, not casts inside the graph: a kernel reads them like any other
/// operand.
template <dtype D, fixed_string H>
using hyper = input<fixed_string("optim.") + H + detail::dtype_suffix<D>(), D, shape<>>;
template <dtype D, fixed_string H>
constexpr auto hp() {
  return hyper<D, H>{};
}
/// The values of hyperparameters at one step, keyed by name at compile time:
/// `hyper_values<"lr", "weight_decay">{lr, weight_decay}`; get<"lr">() reads one (a name that is
/// not there is a compile error).
template <fixed_string... H>
struct hyper_values {
  std::array<double, sizeof...(H)> values{};

  /// The position of K among H..., or -1.
  template <fixed_string K>
  static constexpr int index_of() {
    int i = 0, at = -1;
    ((H.view() == K.view() ? (at = i, ++i) : ++i), ...);
    return at;
  }
  template <fixed_string K>
  constexpr double get() const {
    static_assert(index_of<K>() >= 0, "kiln: hyper_values::get: no hyperparameter of this name (the template argument)");
    return values[static_cast<std::size_t>(index_of<K>())];
  }

  // Type computations by member, not by deducing H... from hyper_values<H...>: nvcc's front end
  // cannot deduce a pack of class-type template arguments.
  /// F<H...>::type.
  template <template <fixed_string...> class F>
  struct apply {
    using type = F<H...>;
  };
  /// hyper_values<H..., More...>.
  template <fixed_string... More>
  struct append {
    using type = hyper_values<H..., More...>;
  };
  /// hyper_values<A..., H...> for A = hyper_values<A...>.
  template <class A>
  struct after {
    using type = typename A::template append<H...>::type;
  };
  /// Both sets of values (an optimizer's and the clipping's): this one's, then b's.
  template <class B>
  friend constexpr auto operator+(const hyper_values& a, const B& b) {
    typename B::template after<hyper_values>::type r;
    for (std::size_t i = 0; i < sizeof...(H); ++i) r.values[i] = a.values[i];
    for (std::size_t i = 0; i < b.values.size(); ++i) r.values[sizeof...(H) + i] = b.values[i];
    return r;
  }
};

/// An optimizer state of parameter P: a placeholder shaped like P named "<P's name><Suffix>".
template <class P, fixed_string Suffix>
using state = input<P::name + Suffix, P::dt, typename P::shape_type>;

/// torch.optim.SGD without momentum: p -= lr (g + weight_decay p).
struct sgd {
  double lr = 0.01;
  double weight_decay = 0;

  template <class P>
  using states = std::tuple<>;
  template <class P, class G>
  static constexpr auto update(const P& p, const G& g) {
    constexpr dtype D = P::dt;
    return kiln::detail::make_pack(p - hp<D, "lr">() * (g + hp<D, "weight_decay">() * p));
  }
  hyper_values<"lr", "weight_decay"> hypers(std::int64_t) const { return {{lr, weight_decay}}; }
};

/// torch.optim.SGD with momentum: g += weight_decay p; b = g at the first step, else
/// b = momentum b + (1 - dampening) g; p -= lr (nesterov ? g + momentum b : b).
struct sgd_momentum {
  double lr = 0.01;
  double momentum = 0.9;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;

  template <class P>
  using states = std::tuple<state<P, ".momentum_buffer">>;
  template <class P, class G, class B>
  static constexpr auto update(const P& p, const G& g, const B& b) {
    constexpr dtype D = P::dt;
    auto gd = g + hp<D, "weight_decay">() * p;
    // the first step's b = g is b = 0 b + 1 g: the trainer feeds the factors of each step
    auto nb = hp<D, "buf_keep">() * b + hp<D, "buf_take">() * gd;
    return kiln::detail::make_pack(p - hp<D, "lr">() * (hp<D, "dir_grad">() * gd + hp<D, "dir_buf">() * nb), nb);
  }
  hyper_values<"lr", "weight_decay", "buf_keep", "buf_take", "dir_grad", "dir_buf"> hypers(std::int64_t step) const {
    const bool first = step == 1;
    return {{lr, weight_decay, first ? 0.0 : momentum, first ? 1.0 : 1.0 - dampening, nesterov ? 1.0 : 0.0,
             nesterov ? momentum : 1.0}};
  }
};

namespace detail {
/// Adam's and AdamW's shared rule: g += l2 p; m += (1 - beta1)(g - m); v += (1 - beta2)(g g - v);
/// p = p decay - step m / (sqrt(v) / sqrt(1 - beta2^t) + eps), step = lr / (1 - beta1^t).
template <class P, class G, class M, class V>
constexpr auto adam_rule(const P& p, const G& g, const M& m, const V& v) {
  constexpr dtype D = P::dt;
  auto gd = g + hp<D, "l2">() * p;
  auto nm = m + hp<D, "one_minus_beta1">() * (gd - m);
  auto nv = v + hp<D, "one_minus_beta2">() * (gd * gd - v);
  auto np = p * hp<D, "decay">() - hp<D, "step_size">() * nm / (sqrt(nv) * hp<D, "inv_sqrt_bc2">() + hp<D, "eps">());
  return kiln::detail::make_pack(np, nm, nv);
}
using adam_hyper_values =
    hyper_values<"l2", "one_minus_beta1", "one_minus_beta2", "decay", "step_size", "inv_sqrt_bc2", "eps">;
inline adam_hyper_values adam_hypers(std::int64_t t, double lr, double beta1, double beta2, double eps, double l2,
                                     double decoupled) {
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  return {{l2, 1.0 - beta1, 1.0 - beta2, 1.0 - lr * decoupled, lr / bc1, 1.0 / std::sqrt(bc2), eps}};
}
}  // namespace detail

/// torch.optim.Adam (weight decay as L2 on the gradient).
struct adam {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;

  template <class P>
  using states = std::tuple<state<P, ".exp_avg">, state<P, ".exp_avg_sq">>;
  template <class P, class G, class M, class V>
  static constexpr auto update(const P& p, const G& g, const M& m, const V& v) {
    return detail::adam_rule(p, g, m, v);
  }
  detail::adam_hyper_values hypers(std::int64_t t) const {
    return detail::adam_hypers(t, lr, beta1, beta2, eps, weight_decay, 0.0);
  }
};

/// torch.optim.AdamW (decoupled weight decay: p *= 1 - lr weight_decay before the Adam step).
struct adamw {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;

  template <class P>
  using states = std::tuple<state<P, ".exp_avg">, state<P, ".exp_avg_sq">>;
  template <class P, class G, class M, class V>
  static constexpr auto update(const P& p, const G& g, const M& m, const V& v) {
    return detail::adam_rule(p, g, m, v);
  }
  detail::adam_hyper_values hypers(std::int64_t t) const {
    return detail::adam_hypers(t, lr, beta1, beta2, eps, 0.0, weight_decay);
  }
};

/// Clipping of all gradients together by their global L2 norm before the update
/// (torch.nn.utils.clip_grad_norm_): g *= min(1, max_norm / (norm + 1e-6)).
struct clip_grad_norm {
  double max_norm = 1.0;
  hyper_values<"max_norm"> hypers() const { return {{max_norm}}; }
};
struct no_clipping {
  hyper_values<> hypers() const { return {}; }
};

namespace detail {
/// Calls f(S{}...) for the state placeholders S of a std::tuple<S...> (as a type: no tuple is made).
template <class States, class F>
constexpr decltype(auto) for_states(F&& f) {
  return [&]<class... S>(std::tuple<S...>*) -> decltype(auto) { return f(S{}...); }(static_cast<States*>(nullptr));
}
template <class Opt, class P, class G>
constexpr auto update_one(const G& g) {
  auto r = for_states<typename Opt::template states<P>>([&](auto... s) { return Opt::update(P{}, g, s...); });
  static_assert(decltype(r)::size == std::tuple_size_v<typename Opt::template states<P>> + 1,
                "an optimizer's update(p, g, states...) returns make_pack(new p, new states...), one per state");
  return r;
}
template <class... G>
constexpr auto squared_norm(const G&... g) {
  return (sum(g * g) + ...);
}
/// For each output after the loss, (its group, its position in the group), given each group's size.
template <std::size_t... N>
constexpr auto flat_positions() {
  std::array<std::pair<std::size_t, std::size_t>, (N + ... + 0)> r{};
  const std::size_t sizes[] = {N..., 0};
  std::size_t f = 0;
  for (std::size_t k = 0; k < sizeof...(N); ++k)
    for (std::size_t j = 0; j < sizes[k]; ++j) r[f++] = {k, j};
  return r;
}
template <std::size_t... N>
inline constexpr auto flat_positions_of = flat_positions<N...>();
}  // namespace detail

/// One training step of `loss` over the parameters in tuple Params with optimizer Opt:
/// kiln::outputs(loss, then for each parameter its new value and its new states).
template <class Opt, class Clip = no_clipping, tensor_operand L, class... P>
constexpr auto training_step(const L& loss, std::tuple<P...>, const Opt& = {}, const Clip& = {}) {
  // grad(loss, wrt(P{}...)) without its std::tuple (core/pack.hpp says why)
  const auto gs = kiln::detail::make_pack(grad(loss, P{})...);
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    // the updates, a pack (new parameter, new states...) per parameter, all in one pack: each
    // reached by position through its base (std::tuple or tuple_cat would instantiate std::get
    // or tuple_cat's steps per parameter, every update's type in their names: docs/build-cost.md)
    const auto ups = [&] {
      if constexpr (std::same_as<Clip, clip_grad_norm>) {
        // one coefficient for every gradient, computed in f32 (or the first parameter's dtype)
        constexpr dtype D = std::tuple_element_t<0, std::tuple<P...>>::dt;
        auto norm = sqrt(detail::squared_norm(cast<D>(kiln::detail::get<I>(gs))...));
        auto coef = min(hp<D, "max_norm">() / (norm + 1e-6), 1.0);
        return kiln::detail::make_pack(detail::update_one<Opt, P>(kiln::detail::get<I>(gs) * cast<P::dt>(coef))...);
      } else {
        return kiln::detail::make_pack(detail::update_one<Opt, P>(kiln::detail::get<I>(gs))...);
      }
    }();
    // each parameter's pack: its new value, then its new states
    constexpr auto& at =
        detail::flat_positions_of<(std::tuple_size_v<typename Opt::template states<P>> + 1)...>;
    return [&]<std::size_t... F>(std::index_sequence<F...>) {
      return outputs(loss, kiln::detail::get<at[F].second>(kiln::detail::get<at[F].first>(ups))...);
    }(std::make_index_sequence<at.size()>{});
  }(std::index_sequence_for<P...>{});
}

/// The names of training_step's outputs after the loss, in order, each with the name of the
/// parameter it belongs to.
template <class Opt, class... P>
std::vector<std::pair<std::string, std::string>> update_names(std::tuple<P...>) {
  std::vector<std::pair<std::string, std::string>> names;
  (
      [&] {
        const std::string owner(P::name.view());
        names.emplace_back(owner, owner);
        detail::for_states<typename Opt::template states<P>>(
            [&](auto... s) { (names.emplace_back(std::string(decltype(s)::name.view()), owner), ...); });
      }(),
      ...);
  return names;
}

/// Learning rate with warm-up and cosine decay, as a function of the step (1-based):
/// linear from lr/warmup to lr over `warmup` steps, then cosine down to min_lr at `total`.
struct cosine_schedule {
  double lr = 1e-3;
  std::int64_t warmup = 0;
  std::int64_t total = 1;
  double min_lr = 0;
  double operator()(std::int64_t step) const {
    if (step <= warmup) return lr * static_cast<double>(step) / static_cast<double>(warmup);
    if (step >= total) return min_lr;
    const double f = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * f));
  }
};
/// Learning rate multiplied by gamma every step_size steps (torch.optim.lr_scheduler.StepLR).
struct step_schedule {
  double lr = 1e-3;
  std::int64_t step_size = 1;
  double gamma = 0.1;
  double operator()(std::int64_t step) const {
    return lr * std::pow(gamma, static_cast<double>((step - 1) / step_size));
  }
};

}  // namespace kiln::optim
