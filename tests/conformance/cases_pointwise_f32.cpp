// The f32 instantiation of cases_pointwise.hpp (one translation unit per dtype: both at once took
// 2 minutes of g++).
#include "cases_pointwise.hpp"

namespace kc {
void pointwise_cases_f32(store& s) { pointwise_cases_of<f32>(s, ""); }
}  // namespace kc
