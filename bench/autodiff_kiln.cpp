// bench/autodiff_kiln.cpp: kiln's rows of the autodiff suite. The training step is written once,
// as kiln expressions on named placeholders (batch extent `dyn`, so that --quick can shrink it):
// the loss, and kiln::grad of it with respect to the six parameters, as one kiln::outputs(...)
// graph. kiln-eager evaluates it with the eager reference backend (one node at a time on the
// decomposed, differentiated graph, single-threaded): its outputs are what every other row is
// compared with. kiln compiles it for the CPU backend (kiln::compile: the differentiated graph
// canonicalised, partitioned into what the backward saves and what it recomputes, fused and
// memory-planned at compile time) and runs the plan's fused kernels on KILN_NUM_THREADS threads.
#include <kiln/kiln.hpp>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "autodiff_common.hpp"

namespace kb {
namespace {

using namespace kiln;

// The step, as its user writes it: the same layers as the cpu suite's mlp (x w + b, weights
// [in, out]), then cross_entropy (mean over the batch) and its gradients.
constexpr auto mlp_step() {
  auto x = input<"x", f32, shape<dyn, mlp_in>>{};
  auto labels = input<"labels", kiln::i64, shape<dyn>>{};  // kiln::i64, the dtype (kb::i64 is a type)
  auto w1 = param<"w1", f32, shape<mlp_in, mlp_hidden>>{};
  auto b1 = param<"b1", f32, shape<mlp_hidden>>{};
  auto w2 = param<"w2", f32, shape<mlp_hidden, mlp_hidden>>{};
  auto b2 = param<"b2", f32, shape<mlp_hidden>>{};
  auto w3 = param<"w3", f32, shape<mlp_hidden, mlp_out>>{};
  auto b3 = param<"b3", f32, shape<mlp_out>>{};
  auto logits = matmul(relu(matmul(relu(matmul(x, w1) + b1), w2) + b2), w3) + b3;
  auto loss = cross_entropy(logits, labels);
  return outputs(loss, grad(loss, wrt(w1, b1, w2, b2, w3, b3)));
}

any_tensor copy_of(const fbuf& b, const dims& shape) {
  any_tensor t(dtype::f32, shape);
  if (t.numel() != b.size()) throw std::logic_error("kiln autodiff bench: input size mismatch");
  std::memcpy(t.bytes(), b.data(), static_cast<std::size_t>(b.size()) * sizeof(float));
  return t;
}

/// The step's feeds: kiln tensors holding copies of the shared inputs (kiln tensors own their
/// storage), bound by name.
std::vector<feed> make_feeds(const ad_workload& w) {
  const index_t b = w.batch;
  tensor<std::int64_t, 1> labels({b});
  std::memcpy(labels.data(), w.labels.data(), static_cast<std::size_t>(b) * sizeof(std::int64_t));
  return {{"x", copy_of(w.x, dims{b, mlp_in})},
          {"labels", labels.any()},
          {"w1", copy_of(w.w1, dims{mlp_in, mlp_hidden})},
          {"b1", copy_of(w.b1, dims{mlp_hidden})},
          {"w2", copy_of(w.w2, dims{mlp_hidden, mlp_hidden})},
          {"b2", copy_of(w.b2, dims{mlp_hidden})},
          {"w3", copy_of(w.w3, dims{mlp_hidden, mlp_out})},
          {"b3", copy_of(w.b3, dims{mlp_out})}};
}

/// Runs f(feeds) (one step: a std::vector<any_tensor> of the seven outputs) and keeps the
/// results alive for outputs().
template <class Fn>
struct kiln_runner final : ad_runner {
  kiln_runner(const ad_workload& w, Fn f) : feeds_(make_feeds(w)), f_(std::move(f)) {}
  void run() override { y_ = f_(std::span<const feed>(feeds_)); }
  std::array<const float*, ad_outputs> outputs() override {
    if (y_.size() != ad_outputs) throw std::logic_error("kiln autodiff bench: the step gave the wrong number of outputs");
    std::array<const float*, ad_outputs> p{};
    for (int q = 0; q < ad_outputs; ++q) {
      any_tensor& t = y_[static_cast<std::size_t>(q)];
      if (t.dt() != dtype::f32 || t.numel() != ad_output_numel(q))
        throw std::logic_error(std::string("kiln autodiff bench: output ") + ad_output_names[q] + " has the wrong type or size");
      t = t.contiguous();
      p[static_cast<std::size_t>(q)] = reinterpret_cast<const float*>(t.bytes());
    }
    return p;
  }

 private:
  std::vector<feed> feeds_;
  Fn f_;
  std::vector<any_tensor> y_;
};
template <class Fn>
std::unique_ptr<ad_runner> make_runner(const ad_workload& w, Fn f) {
  return std::make_unique<kiln_runner<Fn>>(w, std::move(f));
}

}  // namespace

const ad_impl ad_kiln_eager_impl{
    "kiln-eager", [](int) { return 1; },
    [](const ad_workload& w, int) {
      return make_runner(w, [step = mlp_step()](std::span<const feed> f) { return eval_all(step, f, eager::backend); });
    }};

const ad_impl ad_kiln_cpu_impl{
    "kiln", [](int t) { return t; },  // KILN_NUM_THREADS, set to --threads by bench_autodiff and run.sh
    [](const ad_workload& w, int) {
      return make_runner(w, [fn = kiln::compile(mlp_step())](std::span<const feed> f) { return fn(f); });
    }};

}  // namespace kb
