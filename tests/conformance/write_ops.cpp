// conformance_ops <file>: evaluates the conformance cases (cases_*.cpp) and writes them, with
// the seed of their random inputs (KILN_TEST_SEED replays one), to a safetensors file that
// check_ops.py compares with PyTorch.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include <kiln/src.hpp>  // kiln's run-time functions, defined once (KILN_SEPARATE_COMPILATION)

#include "record.hpp"

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::fprintf(stderr, "usage: conformance_ops <out.safetensors>\n");
    return 2;
  }
  kc::store s;
  const char* env = std::getenv("KILN_TEST_SEED");
  const std::uint64_t seed = env && *env ? std::strtoull(env, nullptr, 10) : std::uint64_t{std::random_device{}()};
  s.gen.seed(seed);
  kc::pointwise_cases_f32(s);
  kc::pointwise_cases_f64(s);
  kc::reduction_cases_f32(s);
  kc::reduction_cases_f64(s);
  kc::shape_cases_f32(s);
  kc::shape_cases_f64(s);
  kc::core_cases_f32(s);
  kc::core_cases_f64(s);
  kc::nn_cases_f32(s);
  kc::nn_cases_f64(s);
  kc::more_cases_f32(s);
  kc::more_cases_f64(s);
  kc::layer_cases_f32(s);
  kc::layer_cases_f64(s);
  kc::sort_cases_f32(s);
  kc::sort_cases_f64(s);
  kc::scan_cases_f32(s);
  kc::scan_cases_f64(s);
  kc::option_cases_f32(s);
  kc::option_cases_f64(s);
  s.metadata["seed"] = std::to_string(seed);
  kiln::io::save_safetensors(argv[1], s.tensors, s.metadata);
  std::printf("conformance_ops: %zu tensors of %zu cases written to %s (seed %llu)\n", s.tensors.size(),
              s.metadata.size() - 1, argv[1], static_cast<unsigned long long>(seed));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "conformance_ops: %s\n", e.what());
  return 1;
}
