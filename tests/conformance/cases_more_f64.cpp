// The f64 instantiation of cases_more.hpp (a translation unit per dtype).
#include "cases_more.hpp"

namespace kc {
void more_cases_f64(store& s) { more_cases_of<f64>(s, "_f64"); }
}  // namespace kc
