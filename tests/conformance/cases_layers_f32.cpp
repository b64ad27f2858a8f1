// The f32 instantiation of cases_layers.hpp (a translation unit per dtype).
#include "cases_layers.hpp"

namespace kc {
void layer_cases_f32(store& s) { layer_cases_of<f32>(s, ""); }
}  // namespace kc
