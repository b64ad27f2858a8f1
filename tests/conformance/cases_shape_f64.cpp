// The f64 instantiation of cases_shape.hpp (one translation unit per dtype: both at once took
// 2 minutes of g++).
#include "cases_shape.hpp"

namespace kc {
void shape_cases_f64(store& s) { shape_cases_of<f64>(s, "_f64"); }
}  // namespace kc
