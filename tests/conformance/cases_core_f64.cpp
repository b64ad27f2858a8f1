// The f64 instantiation of cases_core.hpp (a translation unit per dtype).
#include "cases_core.hpp"

namespace kc {
void core_cases_f64(store& s) { core_cases_of<f64>(s, "_f64"); }
}  // namespace kc
