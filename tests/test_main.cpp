// The tests' main, and the one translation unit that defines kiln's run-time functions: the
// tests build with KILN_SEPARATE_COMPILATION (tests/CMakeLists.txt), as a program that compiles
// kiln once would, as the Fashion-MNIST example does; the other examples and the header checks
// build header-only, the default.
#include <kiln/src.hpp>

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
