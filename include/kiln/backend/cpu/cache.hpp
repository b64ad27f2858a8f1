// kiln/backend/cpu/cache.hpp: the sizes of the caches the CPU backend blocks its loops for
// (the GEMM's packed B block, the threshold of streamed stores).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#if defined(__linux__)
#include <unistd.h>
#endif

#include "../../core/config.hpp"

namespace kiln::cpu::detail {

/// The size in bytes of CPU 0's data or unified cache of the given level (1, 2, 3; 0: the
/// highest level there is), as Linux reports it in sysfs (what lscpu prints), else as glibc's
/// sysconf does, else 0 (unknown). sysfs first: in virtual machines sysconf may report the
/// host's whole L3, many times the share that sysfs and lscpu give the guest.
KILN_RUNTIME std::int64_t cache_bytes(int level);

#if KILN_DEFINE_RUNTIME
KILN_RUNTIME std::int64_t cache_bytes(int level) {
#if defined(__linux__)
  std::int64_t best = 0;
  int best_level = 0;
  for (int i = 0; i < 10; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    auto read = [&](const char* name, char* buf, int n) {
      std::FILE* f = std::fopen((dir + name).c_str(), "r");
      if (!f) return false;
      const bool ok = std::fgets(buf, n, f) != nullptr;
      std::fclose(f);
      return ok;
    };
    char lv[16], size[32], type[32];
    if (!read("level", lv, sizeof lv)) break;  // no more caches
    if (!read("size", size, sizeof size)) continue;  // (some VMs and ARM systems leave it out)
    if (read("type", type, sizeof type) && type[0] == 'I') continue;  // an instruction cache
    char* end = nullptr;
    std::int64_t b = std::strtoll(size, &end, 10);
    if (end && (*end == 'K' || *end == 'k')) b <<= 10;
    else if (end && *end == 'M') b <<= 20;
    const int l = std::atoi(lv);
    if (b > 0 && (level == 0 ? l >= best_level : l == level)) {
      best_level = l;
      best = b;
    }
  }
  if (best > 0) return best;
#if defined(_SC_LEVEL3_CACHE_SIZE)
  if (level == 0) {
    for (const int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE})
      if (const long b = ::sysconf(name); b > 0) return b;
  } else if (level == 1 || level == 2 || level == 3) {
    const int names[] = {_SC_LEVEL1_DCACHE_SIZE, _SC_LEVEL2_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE};
    if (const long b = ::sysconf(names[level - 1]); b > 0) return b;
  }
#endif
#endif
  (void)level;
  return 0;
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln::cpu::detail
