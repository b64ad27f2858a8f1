// kiln/optim/trainer.hpp: a model's parameters, its optimizer's state and its compiled training
// step (optim/optimizers.hpp), with checkpoints.
//
//   optim::trainer tr(loss, net::params{}, optim::adam{.lr = 1e-3}, nn::make_params<net>(seed));
//   double l = tr.step({{"x", xb}, {"y", yb}});        // forward, backward, update: one plan
//   tr.save("ckpt.safetensors");  tr.load("ckpt.safetensors");
//
// The step runs on the default backend; a last argument after the clipping names another:
// `optim::trainer tr(loss, params, opt, initial, optim::no_clipping{}, kiln::eager::backend)`.
#pragma once

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

/// A model's parameters, its optimizer's state and one compiled training step. step() runs the
/// step's plan on backend B (backend/backend.hpp; the default backend unless named), writing the new parameters and states into a second set of
/// tensors that then changes places with the first (no allocation, no copy, no aliasing).
template <class Opt, class Clip, class Step, class Params, backend_type B = default_backend>
class trainer {
 public:
  template <tensor_operand L>
  trainer(const L& loss, Params params, Opt opt, nn::state_dict initial, Clip clip = {}, B = B{})
      : step_expr_(training_step(loss, params, opt, clip)), opt_(opt), clip_(clip) {
    names_ = update_names<Opt>(params);
    params_ = std::move(initial);
    const nn::state_dict expected = nn::zeros_for<Params>();
    for (const auto& [name, t] : expected) {
      const auto it = params_.find(name);
      if (it == params_.end()) throw std::invalid_argument("kiln: trainer: no tensor for parameter '" + name + "'");
      if (it->second.dt() != t.dt() || !(it->second.shape() == t.shape()))
        throw shape_error("trainer: parameter '" + name + "'", t.shape(), it->second.shape(), "differ (declared, given)");
    }
    if (params_.size() != expected.size()) throw std::invalid_argument("kiln: trainer: a tensor names no parameter of the model");
    // the hyperparameter inputs of the step's graph: "optim.<h>.<dtype>"
    for (const node& n : traced<Step>::value.nodes) {
      const std::string_view l = n.label();
      if (n.o != op::input || !l.starts_with("optim.")) continue;
      hyper_slot h{std::string(l), std::string(l.substr(0, l.rfind('.'))), any_tensor(n.dt, dims{})};
      bool have = false;
      for (const hyper_slot& o : hyper_) have = have || o.name == h.name;
      if (!have) hyper_.push_back(std::move(h));
    }
    for (const node& n : traced<Step>::value.nodes)
      if (n.o == op::input && n.label() == seed_input::name.view()) seed_value_ = any_tensor(dtype::i64, dims{});
    for (const auto& [n, owner] : names_) {
      if (n != owner) states_[n] = any_tensor(params_.at(owner).dt(), params_.at(owner).shape());  // zeros
      const any_tensor& cur = current(n);
      next_.push_back(any_tensor(cur.dt(), cur.shape()));
    }
  }

  /// One step on a batch (the feeds of the loss's inputs): returns the loss before the update.
  double step(std::span<const feed> batch) {
    ++t_;
    hyper_values hv = opt_.hypers(t_);
    if constexpr (std::same_as<Clip, clip_grad_norm>) hv.emplace_back("optim.max_norm", clip_.max_norm);
    std::vector<feed> f(batch.begin(), batch.end());
    for (hyper_slot& h : hyper_) {
      bool found = false;
      for (const auto& [n, v] : hv)
        if (n == h.base) {
          const double value = v;  // (clang 14 cannot capture a structured binding)
          visit(h.value.dt(), [&]<dtype D>() { *h.value.template data<storage_t<D>>() = storage_t<D>(compute_t<D>(value)); });
          found = true;
        }
      if (!found) throw std::logic_error("kiln: trainer: the optimizer gives no value for " + h.base);
      f.push_back({h.name, h.value});
    }
    if (seed_value_.defined()) {  // a new seed each step: the random ops draw new values
      *seed_value_.template data<std::int64_t>() = static_cast<std::int64_t>(step_seed(seed_, t_));
      f.push_back({seed_input::name.view(), seed_value_});
    }
    for (const auto& [n, t] : params_) f.push_back({n, t});
    for (const auto& [n, t] : states_) f.push_back({n, t});
    std::vector<any_tensor> into(1 + next_.size());
    for (std::size_t i = 0; i < next_.size(); ++i) into[i + 1] = next_[i];
    std::vector<any_tensor> out =
        B::template run<program<Step>>(bind_leaves(traced<Step>::value, step_expr_, f), into);
    for (std::size_t i = 0; i < names_.size(); ++i) std::swap(current(names_[i].first), next_[i]);
    double loss = 0;
    visit(out[0].dt(), [&]<dtype D>() { loss = static_cast<double>(compute_t<D>(*out[0].template data<storage_t<D>>())); });
    return loss;
  }
  double step(std::initializer_list<feed> batch) { return step(std::span<const feed>(batch.begin(), batch.size())); }

  /// The optimizer's settings (change lr between steps for a schedule).
  Opt& options() { return opt_; }
  const nn::state_dict& params() const { return params_; }
  const nn::state_dict& states() const { return states_; }
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
    io::tensor_map all = params_;
    for (const auto& [n, t] : states_) all[n] = t;
    metadata["kiln.step"] = std::to_string(t_);
    io::save_safetensors(path, all, metadata);
  }
  /// Reads what save() wrote (every tensor must match by name, dtype and shape; nothing is
  /// changed unless the whole file is valid). Returns the file's metadata.
  io::metadata_map load(const std::filesystem::path& path) {
    io::tensor_map all = params_;
    for (const auto& [n, t] : states_) all[n] = t;
    const io::metadata_map md = io::read_safetensors_header(path).metadata;
    const auto it = md.find("kiln.step");
    if (it == md.end()) throw io::format_error(path.string(), "no \"kiln.step\" in the metadata: not a kiln checkpoint");
    const std::int64_t t = std::stoll(it->second);
    io::load_into(path, all);
    t_ = t;
    return md;
  }

 private:
  any_tensor& current(const std::string& n) {
    const auto it = params_.find(n);
    return it != params_.end() ? it->second : states_.at(n);
  }

  Step step_expr_;
  Opt opt_;
  Clip clip_;
  std::vector<std::pair<std::string, std::string>> names_;  ///< outputs after the loss, with their parameter
  nn::state_dict params_, states_;
  struct hyper_slot {
    std::string name, base;  // "optim.lr.f32", "optim.lr"
    any_tensor value;
  };
  std::vector<any_tensor> next_;
  std::vector<hyper_slot> hyper_;
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

}  // namespace kiln::optim
