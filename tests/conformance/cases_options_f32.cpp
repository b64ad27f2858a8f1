// The f32 instantiation of cases_options.hpp (a translation unit per dtype).
#include "cases_options.hpp"

namespace kc {
void option_cases_f32(store& s) { option_cases_of<f32>(s, ""); }
}  // namespace kc
