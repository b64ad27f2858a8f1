// The f32 instantiation of cases_scan.hpp (a translation unit per dtype).
#include "cases_scan.hpp"

namespace kc {
void scan_cases_f32(store& s) { scan_cases_of<f32>(s, ""); }
}  // namespace kc
