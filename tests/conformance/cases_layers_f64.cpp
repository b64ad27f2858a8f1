// The f64 instantiation of cases_layers.hpp (a translation unit per dtype).
#include "cases_layers.hpp"

namespace kc {
void layer_cases_f64(store& s) { layer_cases_of<f64>(s, "_f64"); }
}  // namespace kc
