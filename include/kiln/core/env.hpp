// kiln/core/env.hpp: settings read from the environment (KILN_NUM_THREADS, KILN_STREAM_BYTES,
// KILN_STORAGE_CACHE_BYTES), each once, where it is first needed. KILN_LOGS, a list of names,
// has its own parser (debug/logs.hpp).
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace kiln::detail {

/// The environment variable `name` as a decimal integer of at least `least`; nothing when it
/// is unset or empty. Any other value (trailing characters, below `least`, out of range) is
/// ignored with a one-line warning on stderr naming the variable and its value, so that a typo
/// does not pass unnoticed while the default runs.
inline std::optional<long long> env_integer(const char* name, long long least) {
  const char* e = std::getenv(name);
  if (!e || !*e) return std::nullopt;
  char* end = nullptr;
  const int saved = errno;
  errno = 0;
  const long long v = std::strtoll(e, &end, 10);
  const bool range = errno == ERANGE;
  errno = saved;
  if (end != e && *end == '\0' && !range && v >= least) return v;
  std::fprintf(stderr, "kiln: %s=\"%s\" ignored: not a decimal integer >= %lld\n", name, e, least);
  return std::nullopt;
}

}  // namespace kiln::detail
