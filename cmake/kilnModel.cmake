# kiln_add_model(<target> SOURCE <model.cpp> [STATIC]): a library (shared by default) that
# exports one kiln model through the C ABI of <kiln/export/kiln_model.h> (kiln/export.hpp). Of
# a shared library only that ABI's symbols are visible (a version script hides the rest, kiln's
# inline code included), it may not leave symbols undefined, and with g++ it links libgcc
# statically: its dependencies are libc, libm, libstdc++ and (with OpenMP) libgomp. A target
# that links it gets the C header's include directory and <target>.h, a header generated from
# the library that describes the model (names, dtypes, shapes as macros: <TARGET>_INPUT_0_NAME,
# ...), unless cross-compiling; a target that includes it adds add_dependencies(app
# <target>_header). (The project must enable C, project(... C CXX), for the header.)
set(KILN_MODEL_HEADER_SOURCE ${CMAKE_CURRENT_LIST_DIR}/kiln_model_header.c)
function(kiln_add_model target)
  cmake_parse_arguments(arg "STATIC" "SOURCE" "" ${ARGN})
  if(NOT arg_SOURCE)
    message(FATAL_ERROR "kiln_add_model(${target}): SOURCE <file> is required")
  endif()
  if(arg_STATIC)
    add_library(${target} STATIC ${arg_SOURCE})
  else()
    add_library(${target} SHARED ${arg_SOURCE})
  endif()
  target_link_libraries(${target} PRIVATE kiln::kiln)
  target_include_directories(${target} INTERFACE $<TARGET_PROPERTY:kiln::kiln,INTERFACE_INCLUDE_DIRECTORIES>)
  set_target_properties(${target} PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                                             POSITION_INDEPENDENT_CODE ON)
  if(NOT arg_STATIC AND CMAKE_SYSTEM_NAME MATCHES "Linux|FreeBSD")
    set(map ${CMAKE_CURRENT_BINARY_DIR}/${target}.kiln.map)
    file(WRITE ${map} "{\n  global: kiln_*;\n  local: *;\n};\n")
    target_link_options(${target} PRIVATE -Wl,--version-script=${map})
    set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${map})
    if(NOT KILN_SANITIZE)
      target_link_options(${target} PRIVATE -Wl,--no-undefined $<$<CXX_COMPILER_ID:GNU,Clang>:-static-libgcc>)
    endif()
  endif()
  if(KILN_SANITIZE)  # (kiln's own sanitized builds: the runtime comes with each program that loads it)
    target_link_options(${target} INTERFACE -fsanitize=${KILN_SANITIZE})
  endif()
  if(NOT CMAKE_CROSSCOMPILING AND CMAKE_C_COMPILER)
    string(TOUPPER ${target} prefix)
    string(MAKE_C_IDENTIFIER ${prefix} prefix)
    set(dir ${CMAKE_CURRENT_BINARY_DIR}/${target}_include)
    add_executable(${target}_header_writer ${KILN_MODEL_HEADER_SOURCE})
    target_link_libraries(${target}_header_writer PRIVATE ${target})
    add_custom_command(OUTPUT ${dir}/${target}.h
      COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}
      COMMAND ${target}_header_writer ${prefix} ${dir}/${target}.h
      DEPENDS ${target}_header_writer
      COMMENT "Describing the model of ${target} in ${target}.h")
    add_custom_target(${target}_header ALL DEPENDS ${dir}/${target}.h)
    target_include_directories(${target} INTERFACE ${dir})
  endif()
endfunction()
