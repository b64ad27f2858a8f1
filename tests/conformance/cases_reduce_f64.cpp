// The f64 instantiation of cases_reduce.hpp (one translation unit per dtype: both at once took
// 2 minutes of g++).
#include "cases_reduce.hpp"

namespace kc {
void reduction_cases_f64(store& s) { reduction_cases_of<f64>(s, "_f64"); }
}  // namespace kc
