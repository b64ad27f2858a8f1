// bench/export_abi.cpp: the export suite's "kiln-abi" rows, the model as a deployed program uses
// it: the library that kiln_add_model built from examples/export/mnist_mlp.cpp (bench/
// CMakeLists.txt: bench_mnist_mlp), called through <kiln/export/kiln_model.h> only. Weights are
// set once (kiln_model_set_param); per request one kiln_model_run with kiln_tensor descriptors
// of the shared input buffer and the runner's logits (no copies: both are aligned and
// contiguous). This TU includes no other kiln header.
#include <kiln/export/kiln_model.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "export_common.hpp"

namespace kb {
namespace {

void check(int status, const char* what) {
  if (status != KILN_OK) throw std::runtime_error(std::string("kiln-abi: ") + what + ": " + kiln_last_error());
}

struct abi_runner final : fwd_runner {
  abi_runner(const fwd_data& d, int threads) : d_(d), y_(static_cast<std::size_t>(d.batch * fwd_out)) {
    if (kiln_abi_version() != KILN_ABI_VERSION) throw std::runtime_error("kiln-abi: the library's ABI version differs");
    kiln_set_num_threads(threads);
    check(kiln_model_create(&m_), "kiln_model_create");
    for (int q = 0; q < fwd_params; ++q) {
      const auto& s = fwd_param_shapes[static_cast<std::size_t>(q)];
      const int64_t shape[2] = {s[0], s[1]};
      const kiln_tensor t{fwd_param_names[q], KILN_F32, s[1] ? 2 : 1, shape, nullptr,
                          const_cast<float*>(d.params[static_cast<std::size_t>(q)].data())};
      check(kiln_model_set_param(m_, &t), fwd_param_names[q]);
    }
  }
  ~abi_runner() override { kiln_model_destroy(m_); }
  abi_runner(const abi_runner&) = delete;
  abi_runner& operator=(const abi_runner&) = delete;
  void run(std::int64_t k) override {
    const int64_t xs[2] = {d_.batch, fwd_in}, ys[2] = {d_.batch, fwd_out};
    const kiln_tensor x{"x", KILN_F32, 2, xs, nullptr, const_cast<float*>(d_.x.data() + k * d_.batch * fwd_in)};
    kiln_tensor y{nullptr, KILN_F32, 2, ys, nullptr, y_.data()};
    check(kiln_model_run(m_, &x, 1, &y, 1), "kiln_model_run");
  }
  const float* logits() const override { return y_.data(); }

 private:
  const fwd_data& d_;
  kiln_model* m_ = nullptr;
  std::vector<float> y_;
};

}  // namespace

const fwd_impl fwd_abi_impl{"kiln-abi", [](const fwd_data& d, int threads) -> std::unique_ptr<fwd_runner> {
                              return std::make_unique<abi_runner>(d, threads);
                            }};

}  // namespace kb
