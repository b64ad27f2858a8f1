// The f32 instantiation of cases_reduce.hpp (one translation unit per dtype: both at once took
// 2 minutes of g++).
#include "cases_reduce.hpp"

namespace kc {
void reduction_cases_f32(store& s) { reduction_cases_of<f32>(s, ""); }
}  // namespace kc
