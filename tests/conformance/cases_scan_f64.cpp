// The f64 instantiation of cases_scan.hpp (a translation unit per dtype).
#include "cases_scan.hpp"

namespace kc {
void scan_cases_f64(store& s) { scan_cases_of<f64>(s, "_f64"); }
}  // namespace kc
