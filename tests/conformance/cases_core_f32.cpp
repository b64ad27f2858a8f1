// The f32 instantiation of cases_core.hpp (a translation unit per dtype).
#include "cases_core.hpp"

namespace kc {
void core_cases_f32(store& s) { core_cases_of<f32>(s, ""); }
}  // namespace kc
