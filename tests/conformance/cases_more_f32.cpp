// The f32 instantiation of cases_more.hpp (a translation unit per dtype).
#include "cases_more.hpp"

namespace kc {
void more_cases_f32(store& s) { more_cases_of<f32>(s, ""); }
}  // namespace kc
