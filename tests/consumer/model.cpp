// A model exported by the installed package's kiln_add_model (consumer_find_package).
#include <kiln/export.hpp>

KILN_EXPORT_MODEL(kiln::input<"x", kiln::f32, kiln::shape<kiln::dyn>>{} * 2.0f + 1.0f)
