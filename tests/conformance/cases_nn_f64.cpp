// The f64 instantiation of cases_nn.hpp (a translation unit per dtype).
#include "cases_nn.hpp"

namespace kc {
void nn_cases_f64(store& s) { nn_cases_of<f64>(s, "_f64"); }
}  // namespace kc
