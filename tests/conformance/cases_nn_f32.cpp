// The f32 instantiation of cases_nn.hpp (a translation unit per dtype).
#include "cases_nn.hpp"

namespace kc {
void nn_cases_f32(store& s) { nn_cases_of<f32>(s, ""); }
}  // namespace kc
