// Counts the heap a program holds, and its peak: what the readers' memory bounds are checked
// with (test_io, fuzz_safetensors). Without AddressSanitizer it replaces the global operator
// new and delete; under it (which owns them) it counts through the sanitizer's malloc hooks.
// Include it in one translation unit of a program only (it defines the replacements).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define KT_HEAP_HOOKS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KT_HEAP_HOOKS 1
#endif
#endif

#if KT_HEAP_HOOKS
// the sanitizer runtime's allocator interface (declared here: g++ does not ship
// <sanitizer/allocator_interface.h>, clang does; both runtimes define these)
extern "C" {
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*, std::size_t),
                                              void (*free_hook)(const volatile void*));
std::size_t __sanitizer_get_allocated_size(const volatile void* p);
}
#else
#include <malloc.h>
#endif

namespace kt::heap {

// signed: a block allocated before counting began may be freed while counting
inline std::atomic<long long> now{0}, peak{0};

inline void add(long long n) {
  const long long at = now += n;
  for (long long top = peak; at > top && !peak.compare_exchange_weak(top, at);) {
  }
}

/// The most heap held while f ran, beyond what was held before.
template <class F>
std::size_t peak_during(F&& f) {
  const long long base = now;
  peak = base;
  f();
  return static_cast<std::size_t>(peak - base);
}

#if KT_HEAP_HOOKS
inline void on_malloc(const volatile void*, std::size_t n) { add(static_cast<long long>(n)); }
inline void on_free(const volatile void* p) {
  if (p) now -= static_cast<long long>(__sanitizer_get_allocated_size(p));
}
inline const int hooks = __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
#else
inline void* counted(void* p) {
  if (!p) throw std::bad_alloc();
  add(static_cast<long long>(malloc_usable_size(p)));
  return p;
}
inline void give(void* p) noexcept {
  if (p) now -= static_cast<long long>(malloc_usable_size(p));
  std::free(p);
}
inline void* take(std::size_t n) { return counted(std::malloc(n ? n : 1)); }
inline void* take(std::size_t n, std::align_val_t a) {
  const auto align = static_cast<std::size_t>(a);
  return counted(std::aligned_alloc(align, (n + align - 1) / align * align + (n ? 0 : align)));
}
#endif

}  // namespace kt::heap

#if !KT_HEAP_HOOKS
void* operator new(std::size_t n) { return kt::heap::take(n); }
void* operator new[](std::size_t n) { return kt::heap::take(n); }
void* operator new(std::size_t n, std::align_val_t a) { return kt::heap::take(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return kt::heap::take(n, a); }
void operator delete(void* p) noexcept { kt::heap::give(p); }
void operator delete[](void* p) noexcept { kt::heap::give(p); }
void operator delete(void* p, std::size_t) noexcept { kt::heap::give(p); }
void operator delete[](void* p, std::size_t) noexcept { kt::heap::give(p); }
void operator delete(void* p, std::align_val_t) noexcept { kt::heap::give(p); }
void operator delete[](void* p, std::align_val_t) noexcept { kt::heap::give(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { kt::heap::give(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { kt::heap::give(p); }
#endif
