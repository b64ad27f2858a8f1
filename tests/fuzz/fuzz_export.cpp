// libFuzzer target for an exported model's C ABI (kiln/export.hpp): every input is handed to
// kiln_model_load_buffer as a weights file of a small model, then the model is run. A load must
// return KILN_OK or KILN_ERROR_FILE with a message, and change nothing when it fails (the
// outputs of a run before and after are the same); a run after any load must succeed.
#include <kiln/export.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

using X = kiln::input<"x", kiln::f32, kiln::shape<kiln::dyn, 3>>;
using W = kiln::param<"w", kiln::f32, kiln::shape<3, 2>>;
using B = kiln::param<"b", kiln::f32, kiln::shape<2>>;
KILN_EXPORT_MODEL(kiln::matmul(X{}, W{}) + B{})

namespace {

void run(const kiln_model* m, float (&out)[4]) {
  static const float x[6] = {1, 2, 3, 4, 5, 6};
  const std::int64_t xs[2] = {2, 3}, os[2] = {2, 2};
  const kiln_tensor in{"x", KILN_F32, 2, xs, nullptr, const_cast<float*>(x)};
  kiln_tensor o{nullptr, KILN_F32, 2, os, nullptr, out};
  if (kiln_model_run(m, &in, 1, &o, 1) != KILN_OK) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kiln_model* m = nullptr;
  if (kiln_model_create(&m) != KILN_OK) __builtin_trap();
  float before[4], after[4];
  run(m, before);
  const int rc = kiln_model_load_buffer(m, data, size);
  if (rc != KILN_OK && rc != KILN_ERROR_FILE) __builtin_trap();
  if (rc != KILN_OK && kiln_last_error()[0] == '\0') __builtin_trap();  // an error says what is wrong
  run(m, after);
  if (rc != KILN_OK && std::memcmp(before, after, sizeof before) != 0) __builtin_trap();  // nothing written
  kiln_model_destroy(m);
  return 0;
}
