// The f64 instantiation of cases_options.hpp (a translation unit per dtype).
#include "cases_options.hpp"

namespace kc {
void option_cases_f64(store& s) { option_cases_of<f64>(s, "_f64"); }
}  // namespace kc
