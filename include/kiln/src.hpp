// kiln/src.hpp: the definitions of kiln's run-time functions, for a program built with
// KILN_SEPARATE_COMPILATION defined in every translation unit (docs/build-cost.md): include it
// in exactly one of them, before any other kiln header. Without KILN_SEPARATE_COMPILATION it is
// <kiln/kiln.hpp> and every kiln header is header-only, as by default.
#pragma once

#if defined(KILN_SEPARATE_COMPILATION)
#if defined(KILN_CONFIG_HPP_INCLUDED)
#error "kiln: <kiln/src.hpp> must be included before any other kiln header of its translation unit"
#endif
#define KILN_IMPLEMENTATION 1
#endif

#include "kiln.hpp"
#include "optim.hpp"
#include "io/safetensors.hpp"
#include "io/idx.hpp"
#include "data/loader.hpp"
