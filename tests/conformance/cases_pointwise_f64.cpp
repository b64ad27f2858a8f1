// The f64 instantiation of cases_pointwise.hpp (one translation unit per dtype: both at once took
// 2 minutes of g++).
#include "cases_pointwise.hpp"

namespace kc {
void pointwise_cases_f64(store& s) { pointwise_cases_of<f64>(s, "_f64"); }
}  // namespace kc
