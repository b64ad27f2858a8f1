// kiln/core/env.hpp: settings read from the environment (KILN_NUM_THREADS, KILN_STREAM_BYTES,
// KILN_STORAGE_CACHE_BYTES, KILN_GEMM_B_BLOCK_BYTES), each once, where it is first needed.
// KILN_LOGS, a list of names, has its own parser (debug/logs.hpp).
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace kiln::detail {

/// The environment variable `name` as a decimal integer (digits only) of at least `least`;
/// nothing when it is unset or empty. A number too large for long long reads as its largest
/// value (so a huge KILN_STREAM_BYTES still means "never"). Any other value (a sign, spaces,
/// trailing characters, below `least`) is ignored with a one-line warning on stderr naming
/// the variable and its value, so that a typo does not pass unnoticed while the default runs.
inline std::optional<long long> env_integer(const char* name, long long least) {
  const char* e = std::getenv(name);
  if (!e || !*e) return std::nullopt;
  if (*e >= '0' && *e <= '9') {
    char* end = nullptr;
    const int saved = errno;
    const long long v = std::strtoll(e, &end, 10);  // ERANGE: LLONG_MAX, as wanted
    errno = saved;
    if (*end == '\0' && v >= least) return v;
  }
  std::fprintf(stderr, "kiln: %s=\"%s\" ignored: not a decimal integer >= %lld\n", name, e, least);
  return std::nullopt;
}

}  // namespace kiln::detail
