# kiln_add_runtime(<target>): a static library of kiln's run-time code (<kiln/src.hpp>: the CPU
# backend's driver, the thread pool, tensors' storage, the eager interpreter, the file readers,
# ...), compiled once. A target that links it builds with KILN_SEPARATE_COMPILATION, so its units
# only declare that code instead of compiling it again each (docs/build-cost.md). Every unit of
# the program that includes kiln must then build with the macro: link the library to each target
# that includes kiln, since mixing the two modes breaks the one-definition rule.
function(kiln_add_runtime target)
  if(ARGN)
    message(FATAL_ERROR "kiln_add_runtime(${target}): unexpected arguments '${ARGN}' (it takes a target name only)")
  endif()
  set(src ${CMAKE_CURRENT_BINARY_DIR}/${target}_kiln_runtime.cpp)
  # (written only when it changes, so a reconfigure does not rebuild it)
  file(CONFIGURE OUTPUT ${src} CONTENT "// kiln's run-time code, compiled once (kiln_add_runtime)\n#include <kiln/src.hpp>\n")
  add_library(${target} STATIC ${src})
  target_link_libraries(${target} PUBLIC kiln::kiln)
  target_compile_definitions(${target} PUBLIC KILN_SEPARATE_COMPILATION)
  # (a shared library may link it too; the kernels are in its users' units, not here)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()
