// kiln/backend/backend.hpp: what a backend is. A backend runs the frozen plans of the pipeline
// (passes/pipeline.hpp) on tensors; eval, compile, the trainer and tensor assignment reach it
// only through this contract, so a new backend is a new header (docs/adding-a-backend.md).
//
//   struct my_backend {
//     // P is kiln::program<E>: P::schedule() is E's frozen plan (fused kernels, memory
//     // plan), P::reference() the unfused graph the eager reference runs; the backend calls
//     // P::log_schedule() or P::log_reference(), whichever it runs, for KILN_LOGS.
//     template <class P>
//     static std::vector<any_tensor> run(const std::vector<any_tensor>& leaves, std::span<const any_tensor> into);
//   };
//
// The contract of run<P>(leaves, into):
//  - `leaves` is the leaf table of E's graph, by slot (kiln::bind_leaves has checked every
//    placeholder's dtype and declared extents); the backend checks run-time extents and throws
//    kiln::shape_error naming the op and both shapes.
//  - `into` is empty, or holds one tensor per output: output q goes into into[q] when that is
//    defined (it must have the output's dtype and shape, else dtype_error/shape_error; it may be
//    a strided view, and may share storage with a leaf), and into a new tensor otherwise.
//  - it returns the outputs (into[q] itself where that was defined); a new output never shares
//    storage with a leaf. On an error it throws before writing any destination.
//  - it may be called from several threads at once.
//
// Optional members, used where a backend has them:
//     template <class P>
//     static std::vector<dims> output_shapes(const std::vector<any_tensor>& leaves);
//   the outputs' shapes for these leaves, checked as run<P> checks them, without running the
//   plan (model export needs it: kiln_model_output_shapes);
//     static int num_threads();  static int set_num_threads(int n);
//   the threads it runs kernels on (kiln::num_threads and kiln::set_num_threads for the default
//   backend).
#pragma once

#include <concepts>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/tensor.hpp"
#include "../debug/logs.hpp"
#include "../passes/pipeline.hpp"

namespace kiln {

/// What a backend runs for expression type E: the frozen plan, or the unfused reference graph.
/// Functions, so that a backend instantiates only the stages it uses. A backend calls the log
/// function of what it runs (KILN_LOGS prints the stages of that, the first time E runs).
template <class E>
struct program {
  using expr = E;
  static constexpr const auto& schedule() { return plan<E>::schedule; }
  static constexpr const auto& reference() { return eager_graph<E>(); }
  static void log_schedule() { log_plan_once<E, plan<E>::schedule>(); }
  static void log_reference() { log_reference_once<E, eager_graph<E>()>(); }
};

namespace detail {
/// A stand-in plan type: the backend concept checks run's declaration with it, not its body.
struct backend_probe_plan;
}  // namespace detail

/// A backend: an empty, default-constructible type with run<P>(leaves, into) as above.
template <class B>
concept backend_type =
    std::is_empty_v<B> && std::default_initializable<B> &&
    requires(const std::vector<any_tensor>& leaves, std::span<const any_tensor> into) {
      { B::template run<detail::backend_probe_plan>(leaves, into) } -> std::same_as<std::vector<any_tensor>>;
    };

/// For backends that compute every output into new tensors: moves `outs` into the caller's
/// destinations where `into` has them. Every destination is checked before any is written.
KILN_RUNTIME std::vector<any_tensor> deliver(std::vector<any_tensor> outs, std::span<const any_tensor> into);

#if KILN_DEFINE_RUNTIME
KILN_RUNTIME std::vector<any_tensor> deliver(std::vector<any_tensor> outs, std::span<const any_tensor> into) {
  if (into.empty()) return outs;
  if (into.size() != outs.size())
    throw std::invalid_argument("kiln: " + std::to_string(into.size()) + " destinations for " +
                                std::to_string(outs.size()) + " outputs");
  for (std::size_t q = 0; q < outs.size(); ++q) {
    if (!into[q].defined()) continue;
    if (into[q].dt() != outs[q].dt()) throw dtype_error("assign", into[q].dt(), outs[q].dt());
    if (!(into[q].shape() == outs[q].shape())) throw shape_error("assign", into[q].shape(), outs[q].shape(), "differ");
  }
  for (std::size_t q = 0; q < outs.size(); ++q)
    if (into[q].defined()) {
      into[q].copy_from(outs[q]);
      outs[q] = into[q];
    }
  return outs;
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln
