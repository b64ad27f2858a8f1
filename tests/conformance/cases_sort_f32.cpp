// The f32 instantiation of cases_sort.hpp (a translation unit per dtype).
#include "cases_sort.hpp"

namespace kc {
void sort_cases_f32(store& s) { sort_cases_of<f32>(s, ""); }
}  // namespace kc
