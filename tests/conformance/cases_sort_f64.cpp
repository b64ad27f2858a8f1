// The f64 instantiation of cases_sort.hpp (a translation unit per dtype).
#include "cases_sort.hpp"

namespace kc {
void sort_cases_f64(store& s) { sort_cases_of<f64>(s, "_f64"); }
}  // namespace kc
