// The export tests' model library (kiln_add_model in tests/CMakeLists.txt).
#include <kiln/export.hpp>

#include "mlp.hpp"

KILN_EXPORT_MODEL(kt_export::mlp())
