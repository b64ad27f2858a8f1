// The f32 instantiation of cases_shape.hpp (one translation unit per dtype: both at once took
// 2 minutes of g++).
#include "cases_shape.hpp"

namespace kc {
void shape_cases_f32(store& s) { shape_cases_of<f32>(s, ""); }
}  // namespace kc
