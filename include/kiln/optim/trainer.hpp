// kiln/optim/trainer.hpp: a model's parameters, its optimizer's state and its compiled training
// step (optim/optimizers.hpp), with checkpoints.
//
//   optim::trainer tr(loss, net::params{}, optim::adam{.lr = 1e-3}, nn::make_params<net>(seed));
//   double l = tr.step(X{} = xb, Y{} = yb);             // forward, backward, update: one plan
//   auto logits = eval(net{}(X{}), X{} = xs, tr.params());
//   tr.save("ckpt.safetensors");  tr.load("ckpt.safetensors");
//
// The step runs on the default backend; a last argument after the clipping names another:
// `optim::trainer tr(loss, params, opt, initial, optim::no_clipping{}, kiln::eager::backend)`.
#pragma once

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../io/safetensors.hpp"
#include "../nn/modules.hpp"
#include "optimizers.hpp"

namespace kiln::optim {

namespace detail {
/// Hyperparameter H of dtype D, with its name kept for reading its value.
template <dtype D, fixed_string H>
struct hyper_slot {
  using placeholder = hyper<D, H>;
  static constexpr auto key = H;
};
/// Whether the graph of Step has placeholder P.
template <class Step, class P>
inline constexpr bool step_reads = [] {
  for (const int k : kiln::detail::placeholder_nodes<Step>::value)
    if (kiln::detail::same_placeholder(traced<Step>::value.nodes[k], P::make())) return true;
  return false;
}();
template <class Step, class S>
using slot_if_read = std::conditional_t<step_reads<Step, typename S::placeholder>, std::tuple<S>, std::tuple<>>;

/// The hyperparameter inputs that the graph of Step reads, as hyper_slots: hyper<D, H> for each
/// name H of Values (an optimizer's and its clipping's hyper_values) and floating dtype D.
/// (Values' names through Values::apply, not deduced by a partial specialisation: nvcc's front
/// end cannot deduce a pack of class-type template arguments.)
template <class Step, class Values>
struct hyper_slots_of {
  template <fixed_string... H>
  struct named {
    template <dtype D>
    using of = decltype(std::tuple_cat(std::declval<slot_if_read<Step, hyper_slot<D, H>>>()...));
    using type = decltype(std::tuple_cat(std::declval<of<dtype::bf16>>(), std::declval<of<dtype::f32>>(),
                                         std::declval<of<dtype::f64>>()));
  };
  using type = typename Values::template apply<named>::type::type;
};
/// The states of parameters P... under optimizer Opt, and the step's outputs after the loss
/// (each parameter, then its states: training_step's order).
template <class Opt, class P>
using with_states =
    decltype(std::tuple_cat(std::declval<std::tuple<P>>(), std::declval<typename Opt::template states<P>>()));
template <class Opt, class Params>
struct step_sets;
template <class Opt, class... P>
struct step_sets<Opt, std::tuple<P...>> {
  using states = decltype(std::tuple_cat(std::declval<typename Opt::template states<P>>()...));
  using outputs = decltype(std::tuple_cat(std::declval<with_states<Opt, P>>()...));
};
template <class Slots>
struct slot_placeholders;
template <class... S>
struct slot_placeholders<std::tuple<S...>> {
  using type = std::tuple<typename S::placeholder...>;
};
}  // namespace detail

/// A model's parameters, its optimizer's state and one compiled training step. step() runs the
/// step's plan on backend B (backend/backend.hpp; the default backend unless named), writing the
/// new parameters and states into a second set of tensors that then changes places with the
/// first (no allocation, no copy, no aliasing); the initial parameters are copied, so the
/// caller's tensors are never written. Parameters, states and hyperparameters are bound to the
/// step's placeholders by type; names appear only in checkpoints.
template <class Opt, class Clip, class Step, class Params, backend_type B = default_backend>
class trainer {
 public:
  using param_set = nn::param_set<Params>;
  /// The optimizer's states of every parameter (Opt::states<P>...), as one set.
  using state_set = tensor_set<typename detail::step_sets<Opt, Params>::states>;

  template <tensor_operand L>
  trainer(const L& loss, Params params, Opt opt, nn::state_dict initial, Clip clip = {}, B b = B{})
      : trainer(loss, params, opt, param_set(initial), clip, b) {}
  template <tensor_operand L>
  trainer(const L& loss, Params params, Opt opt, param_set initial, Clip clip = {}, B = B{})
      : step_expr_(training_step(loss, params, opt, clip)), opt_(opt), clip_(clip), params_(std::move(initial)) {
    // the trainer's own copy: its steps write into its two sets of tensors in turn
    for (any_tensor* t : params_.tensors()) *t = t->clone();
    if constexpr (uses_seed) seed_value_ = any_tensor(dtype::i64, dims{});
  }

  /// One step on a batch, its inputs bound by type (`tr.step(X{} = xb, Y{} = yb)`, checked at
  /// compile time with the parameters, states and hyperparameters the trainer binds): returns
  /// the loss before the update.
  template <class... A>
    requires(typed_feeds<A> && ...)
  double step(const A&... batch) {
    begin_step();
    const auto run = [&](const auto&... all) {
      if constexpr (!binds<Step, decltype(all)...>) {
        kiln::detail::report_binding<Step>(kiln::detail::placeholders_of_args<decltype(all)...>);  // one error
        return 0.0;
      } else {
        return finish(kiln::detail::bind_typed(step_expr_, all...));
      }
    };
    if constexpr (uses_seed) return run(batch..., hyper_, typed_feed<seed_input>{{}, seed_value_}, params_, states_);
    else return run(batch..., hyper_, params_, states_);
  }
  /// The same with the batch bound by name.
  double step(std::span<const feed> batch) {
    begin_step();
    std::vector<feed> f(batch.begin(), batch.end());
    add_feeds(f, hyper_);
    if constexpr (uses_seed) f.push_back({seed_input::name.view(), seed_value_});
    add_feeds(f, params_);
    add_feeds(f, states_);
    return finish(bind_leaves(traced<Step>::value, step_expr_, f));
  }
  double step(std::initializer_list<feed> batch) { return step(std::span<const feed>(batch.begin(), batch.size())); }

  /// The optimizer's settings (change lr between steps for a schedule).
  Opt& options() { return opt_; }
  /// The parameters by type (`params().get<W>()`); they convert to a state_dict.
  const param_set& params() const { return params_; }
  const state_set& states() const { return states_; }
  /// Steps taken so far.
  std::int64_t steps() const { return t_; }
  /// The base seed of the random ops in the step (dropout): step t feeds kiln::seed_input the
  /// value step_seed(seed, t), so a run repeated or resumed with the same seed draws the same
  /// masks. Not saved in checkpoints: set it again before resuming.
  void seed(std::uint64_t s) { seed_ = s; }
  /// The seed fed at step t (splitmix64 of the base seed and t).
  static constexpr std::uint64_t step_seed(std::uint64_t base, std::int64_t t) {
    std::uint64_t z = base + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(t + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// The frozen plan of the step.
  static constexpr const auto& schedule = plan<Step>::schedule;

  /// Writes parameters, optimizer state and the step count (metadata "kiln.step", with
  /// `metadata`) to a safetensors file, atomically.
  void save(const std::filesystem::path& path, io::metadata_map metadata = {}) const {
    metadata["kiln.step"] = std::to_string(t_);
    io::save_safetensors(path, by_name(), metadata);
  }
  /// Reads what save() wrote (every tensor must match by name, dtype and shape; nothing is
  /// changed unless the whole file is valid). Returns the file's metadata.
  io::metadata_map load(const std::filesystem::path& path) {
    const io::tensor_map all = by_name();  // the same storage as the sets
    // the step is checked from the same read of the file as the tensors, before they are written
    std::int64_t t = 0;
    io::load_options opt;
    opt.accept = [&](const io::metadata_map& md) {
      const auto it = md.find("kiln.step");
      if (it == md.end()) throw io::format_error(path.string(), "no \"kiln.step\" in the metadata: not a kiln checkpoint");
      t = parse_step(path, it->second);
    };
    io::metadata_map md = io::load_into(path, all, opt);
    t_ = t;
    return md;
  }

 private:
  /// "kiln.step" as save() writes it: decimal digits, a count of steps (0 or more).
  static std::int64_t parse_step(const std::filesystem::path& path, const std::string& v) {
    std::int64_t t = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), t);
    if (v.empty() || v[0] == '-' || ec != std::errc{} || end != v.data() + v.size())
      throw io::format_error(path.string(), "\"kiln.step\" is \"" + v + "\", not a count of steps");
    return t;
  }

  static constexpr bool uses_seed = detail::step_reads<Step, seed_input>;
  using hyper_slots =
      typename detail::hyper_slots_of<Step, decltype(std::declval<const Opt&>().hypers(std::int64_t{1}) +
                                                     std::declval<const Clip&>().hypers())>::type;
  using hyper_set = tensor_set<typename detail::slot_placeholders<hyper_slots>::type>;
  /// The step's outputs after the loss: each parameter, then its states.
  using output_set = tensor_set<typename detail::step_sets<Opt, Params>::outputs>;

  /// Counts the step and writes its hyperparameters and seed.
  void begin_step() {
    ++t_;
    const auto values = opt_.hypers(t_) + clip_.hypers();
    [&]<class... S>(std::tuple<S...>*) {
      const auto write = [&]<class Slot>(std::type_identity<Slot>) {
        constexpr dtype D = Slot::placeholder::dt;
        *hyper_.template get<typename Slot::placeholder>().data() =
            storage_t<D>(compute_t<D>(values.template get<Slot::key>()));
      };
      (write(std::type_identity<S>{}), ...);
    }(static_cast<hyper_slots*>(nullptr));
    // a new seed each step: the random ops draw new values
    if constexpr (uses_seed) *seed_value_.template data<std::int64_t>() = static_cast<std::int64_t>(step_seed(seed_, t_));
  }
  /// The tensors of a set as feeds by name.
  template <class S>
  static void add_feeds(std::vector<feed>& f, const S& set) {
    const auto t = set.tensors();
    for (std::size_t i = 0; i < S::size(); ++i) f.push_back({S::info[i].name, *t[i]});
  }
  /// Where each output after the loss goes: a parameter's position (0, 1, ...) or a state's
  /// (-1, -2, ...). Loops over this, not over the placeholder types: code per placeholder type
  /// of a large model costs g++ more to name than to compile.
  static constexpr auto output_home = [] {
    std::array<int, output_set::size()> r{};
    for (std::size_t i = 0; i < r.size(); ++i) {
      const int p = kiln::detail::find_slot(param_set::info, output_set::info[i]);
      r[i] = p >= 0 ? p : -1 - kiln::detail::find_slot(state_set::info, output_set::info[i]);
    }
    return r;
  }();
  /// Runs the step on its leaf table into the second set, swaps the sets, returns the loss.
  double finish(const std::vector<any_tensor>& leaves) {
    const auto next = next_.tensors();
    std::vector<any_tensor> into(1 + next.size());
    for (std::size_t i = 0; i < next.size(); ++i) into[1 + i] = *next[i];
    std::vector<any_tensor> out = B::template run<program<Step>>(leaves, into);
    const auto params = params_.tensors();
    const auto states = states_.tensors();
    for (std::size_t i = 0; i < next.size(); ++i) {
      const int h = output_home[i];
      std::swap(*next[i], h >= 0 ? *params[static_cast<std::size_t>(h)] : *states[static_cast<std::size_t>(-1 - h)]);
    }
    double loss = 0;
    visit(out[0].dt(), [&]<dtype D>() { loss = static_cast<double>(compute_t<D>(*out[0].template data<storage_t<D>>())); });
    return loss;
  }
  /// Parameters and states by name, sharing storage (for checkpoints).
  io::tensor_map by_name() const {
    io::tensor_map all = params_.by_name();
    all.merge(states_.by_name());
    return all;
  }

  Step step_expr_;
  Opt opt_;
  Clip clip_;
  param_set params_;
  state_set states_;
  output_set next_;
  hyper_set hyper_;
  any_tensor seed_value_;  ///< fed as kiln::seed_input when the step has random ops
  std::uint64_t seed_ = 0;
  std::int64_t t_ = 0;
};

template <tensor_operand L, class Params, class Opt, class Clip = no_clipping>
trainer(const L& loss, Params, Opt, nn::state_dict, Clip = {})
    -> trainer<Opt, Clip, decltype(training_step(std::declval<const L&>(), Params{}, Opt{}, Clip{})), Params>;
template <tensor_operand L, class Params, class Opt, class Clip, backend_type B>
trainer(const L& loss, Params, Opt, nn::state_dict, Clip, B)
    -> trainer<Opt, Clip, decltype(training_step(std::declval<const L&>(), Params{}, Opt{}, Clip{})), Params, B>;
template <tensor_operand L, class Params, class Opt, class Clip = no_clipping>
trainer(const L& loss, Params, Opt, nn::param_set<Params>, Clip = {})
    -> trainer<Opt, Clip, decltype(training_step(std::declval<const L&>(), Params{}, Opt{}, Clip{})), Params>;
template <tensor_operand L, class Params, class Opt, class Clip, backend_type B>
trainer(const L& loss, Params, Opt, nn::param_set<Params>, Clip, B)
    -> trainer<Opt, Clip, decltype(training_step(std::declval<const L&>(), Params{}, Opt{}, Clip{})), Params, B>;

}  // namespace kiln::optim
