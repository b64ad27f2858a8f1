// bench/export_kiln.cpp: the export suite's "kiln" rows, the model called from C++ as a program
// that includes kiln calls it: kiln::compiled over examples/export/mnist_mlp.hpp's expression
// (the one the exported library holds), its feeds (the parameters and the request's input, a
// view of the shared buffer) and its destination (a view of the runner's logits) built once,
// then f(feeds, out) per request: the same plan run as kiln_model_run's, without the ABI.
#include <kiln/nn/modules.hpp>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "../examples/export/mnist_mlp.hpp"
#include "export_common.hpp"

namespace kb {
namespace {

using namespace kiln;

using expr_t = decltype(mnist::logits());

struct kiln_runner final : fwd_runner {
  kiln_runner(const fwd_data& d, int threads) : f_(mnist::logits()), y_(static_cast<std::size_t>(d.batch * fwd_out)) {
    cpu::set_num_threads(threads);
    for (int q = 0; q < fwd_params; ++q) {
      const auto& s = fwd_param_shapes[static_cast<std::size_t>(q)];
      const dims shape = s[1] ? dims{s[0], s[1]} : dims{s[0]};
      any_tensor t(dtype::f32, shape);
      const auto& v = d.params[static_cast<std::size_t>(q)];
      if (static_cast<index_t>(v.size()) != t.numel()) throw std::logic_error("kiln export bench: parameter size");
      std::memcpy(t.data<float>(), v.data(), v.size() * sizeof(float));
      params_.push_back(std::move(t));
    }
    for (std::int64_t k = 0; k < d.requests; ++k) {
      std::vector<feed> f;
      for (int q = 0; q < fwd_params; ++q) f.push_back({fwd_param_names[q], params_[static_cast<std::size_t>(q)]});
      f.push_back({"x", any_tensor::from_blob(dtype::f32, const_cast<float*>(d.x.data() + k * d.batch * fwd_in),
                                              dims{d.batch, fwd_in})});
      feeds_.push_back(std::move(f));
    }
    out_.push_back(any_tensor::from_blob(dtype::f32, y_.data(), dims{d.batch, fwd_out}));
  }
  void run(std::int64_t k) override { f_(std::span<const feed>(feeds_[static_cast<std::size_t>(k)]), out_); }
  const float* logits() const override { return y_.data(); }

 private:
  compiled<expr_t, cpu::backend_t> f_;
  std::vector<float> y_;
  std::vector<any_tensor> params_, out_;
  std::vector<std::vector<feed>> feeds_;
};

// The six parameters concatenated (2.1 MB: in L2/L3, as the models' are), summed at each call
// with vectors, split between the threads by kiln's pool as a compiled call splits its kernels
// (cpu::with_team), so that it pays the same wake-up as the kiln rows; a plain OpenMP region
// (passive wait policy, bench_main.hpp) took 55 us of waking up against 9 us of reading.
struct read_weights_runner final : fwd_runner {
  read_weights_runner(const fwd_data& d, int threads) {
    cpu::set_num_threads(threads);
    for (const auto& p : d.params) w_.insert(w_.end(), p.begin(), p.end());
    part_.resize(static_cast<std::size_t>(threads));
  }
  void run(std::int64_t) override {
    using V = xsimd::batch<float>;
    constexpr std::int64_t w = static_cast<std::int64_t>(V::size);
    const auto n = static_cast<std::int64_t>(w_.size()), parts = static_cast<std::int64_t>(part_.size());
    cpu::with_team([&] { cpu::parallel_for(parts, 1, [&](index_t begin, index_t end) {
      for (index_t t = begin; t < end; ++t) {
        const std::int64_t i0 = n * t / parts / (4 * w) * (4 * w), i1 = t + 1 == parts ? n : n * (t + 1) / parts / (4 * w) * (4 * w);
        V s0(0.0f), s1(0.0f), s2(0.0f), s3(0.0f);
        std::int64_t i = i0;
        for (; i + 4 * w <= i1; i += 4 * w) {
          s0 += V::load_unaligned(w_.data() + i);
          s1 += V::load_unaligned(w_.data() + i + w);
          s2 += V::load_unaligned(w_.data() + i + 2 * w);
          s3 += V::load_unaligned(w_.data() + i + 3 * w);
        }
        float s = xsimd::hadd((s0 + s1) + (s2 + s3));
        for (; i < i1; ++i) s += w_[static_cast<std::size_t>(i)];
        part_[static_cast<std::size_t>(t)] = s;
      }
    }, 1); });
  }
  const float* logits() const override { return part_.data(); }

 private:
  std::vector<float> w_, part_;
};

}  // namespace

const fwd_impl fwd_read_weights_impl{"read-weights", [](const fwd_data& d, int threads) -> std::unique_ptr<fwd_runner> {
                                       return std::make_unique<read_weights_runner>(d, threads);
                                     }};

fwd_param_values fwd_initial_params(std::uint64_t seed) {
  const auto sd = nn::make_params<mnist::net>(seed);
  fwd_param_values v;
  for (int q = 0; q < fwd_params; ++q) {
    const any_tensor& t = sd.at(fwd_param_names[q]);
    if (!t.is_contiguous()) throw std::logic_error("kiln export bench: parameter layout");
    v[static_cast<std::size_t>(q)].assign(t.data<float>(), t.data<float>() + t.numel());
  }
  return v;
}

const fwd_impl fwd_kiln_impl{"kiln", [](const fwd_data& d, int threads) -> std::unique_ptr<fwd_runner> {
                               return std::make_unique<kiln_runner>(d, threads);
                             }};

}  // namespace kb
