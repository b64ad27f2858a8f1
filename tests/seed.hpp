// The tests' random generator, kept apart from support.hpp so that tests which do not include
// all of kiln (test_io, test_gemm) draw from it too, and KILN_TEST_SEED replays every test.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <random>

namespace kt {

/// A generator seeded from std::random_device, or from KILN_TEST_SEED to replay a run; the
/// seed is reported if a check fails.
inline std::mt19937_64& rng() {
  static const std::uint64_t seed = [] {
    const char* s = std::getenv("KILN_TEST_SEED");
    return s && *s ? std::strtoull(s, nullptr, 10) : std::uint64_t{std::random_device{}()};
  }();
  static std::mt19937_64 g(seed);
  static const bool once = [] {
    MESSAGE("random seed " << seed);
    return true;
  }();
  (void)once;
  return g;
}

/// A count from the environment variable `name` (a positive integer), else `fallback`: how the
/// fuzz runs (scripts/fuzz.sh) scale the random tests up.
inline long env_count(const char* name, long fallback) {
  const char* s = std::getenv(name);
  const long n = s && *s ? std::strtol(s, nullptr, 10) : 0;
  return n > 0 ? n : fallback;
}

}  // namespace kt
