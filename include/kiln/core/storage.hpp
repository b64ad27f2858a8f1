// kiln/core/storage.hpp: where tensor storage and the CPU backend's scratch buffers come from.
//
// Large blocks (at least storage_cache_min_bytes) that are freed go to a cache instead of back
// to the system, and a later allocation of the same size (rounded up to 4 KiB) takes one from
// there. Without it, each call of a compiled model that returns fresh multi-MiB results (the
// gradients of a training step) gets them from the kernel as new pages, and the page faults
// that zero-fill them on first touch take a large share of a small step. glibc's malloc gives
// such blocks back with munmap or trims them off its heap, so it does not keep them either.
//
// The cache holds at most storage_cache_limit() bytes (256 MiB unless KILN_STORAGE_CACHE_BYTES,
// a decimal byte count read once, when the cache is first used, says otherwise, or
// set_storage_cache_limit is called; 0 turns it off), and gives back the blocks freed longest
// ago first. Only blocks of the same rounded size are reused. release_cached_storage() gives
// everything back, and an allocation that the system refuses is tried again once after that.
// It is one per process and thread-safe.
//
// Under AddressSanitizer the default limit is 0: a reused block would end ASan's quarantine
// of freed memory early, so a dangling pointer into it would go unreported once the block
// serves another tensor. With a limit set there, the blocks are poisoned while cached.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <new>
#include <vector>

#include "config.hpp"
#include "env.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(KILN_ASAN)
#define KILN_ASAN 1
#endif
#if defined(KILN_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace kiln {

/// Alignment of every allocation, in bytes (a cache line, and the widest SIMD register).
inline constexpr std::size_t storage_alignment = 64;

/// Blocks smaller than this are not cached (malloc serves them from its heap without faults).
inline constexpr std::size_t storage_cache_min_bytes = std::size_t{128} << 10;

/// What the storage cache holds and has done since the process started.
struct storage_cache_stats {
  std::size_t bytes = 0;        ///< bytes held now
  std::size_t blocks = 0;       ///< blocks held now
  std::uint64_t hits = 0;       ///< allocations served from the cache
  std::uint64_t misses = 0;     ///< cacheable allocations that found no block of their size
  std::uint64_t evictions = 0;  ///< blocks given back to the system to stay within the limit
};

namespace detail {

class storage_cache {
 public:
  KILN_RUNTIME static storage_cache& get();

  /// size: from rounded_size.
  KILN_RUNTIME std::byte* allocate(std::size_t size);

  KILN_RUNTIME void release(std::byte* p, std::size_t size) noexcept;

  KILN_RUNTIME std::size_t set_limit(std::size_t bytes);
  std::size_t limit() {
    std::lock_guard lock(m_);
    return limit_;
  }
  KILN_RUNTIME void clear();
  storage_cache_stats stats() {
    std::lock_guard lock(m_);
    return {bytes_, held_.size(), hits_, misses_, evictions_};
  }

  /// Allocation sizes: a multiple of the alignment, at least one unit; cacheable sizes a
  /// multiple of 4 KiB, so that nearly equal sizes share blocks.
  static std::size_t rounded_size(std::size_t bytes) {
    if (bytes > std::numeric_limits<std::size_t>::max() / 2) throw std::bad_array_new_length();
    const std::size_t unit = bytes >= storage_cache_min_bytes ? std::size_t{4096} : storage_alignment;
    const std::size_t r = (bytes + unit - 1) / unit * unit;
    return r ? r : storage_alignment;
  }

 private:
  struct block {
    std::byte* p;
    std::size_t size;
  };
  KILN_RUNTIME storage_cache();
  /// A held block of this size (the most recently freed), or null.
  KILN_RUNTIME std::byte* take(std::size_t size);
  /// Moves the oldest blocks to `out` until at most `keep` bytes are held (m_ held).
  KILN_RUNTIME void trim(std::size_t keep, std::vector<block>& out);
  static void free_block(const block& b) noexcept {
#if defined(KILN_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(b.p, b.size);  // a cached block is poisoned: the allocator's again
#endif
    ::operator delete(b.p, std::align_val_t{storage_alignment});
  }
  static void free_block(std::byte* p) noexcept {
    ::operator delete(p, std::align_val_t{storage_alignment});
  }

  std::mutex m_;
  std::vector<block> held_;  // oldest first
#if defined(KILN_ASAN)
  std::size_t bytes_ = 0, limit_ = 0;
#else
  std::size_t bytes_ = 0, limit_ = std::size_t{256} << 20;
#endif
  std::uint64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

#if KILN_DEFINE_RUNTIME
KILN_RUNTIME storage_cache& storage_cache::get() {
  // never destroyed: tensors in static objects may be freed after it would have been
  static storage_cache* c = new storage_cache;
  return *c;
}

KILN_RUNTIME std::byte* storage_cache::allocate(std::size_t size) {
  if (size >= storage_cache_min_bytes) {
    if (std::byte* p = take(size)) return p;
  }
  try {
    return static_cast<std::byte*>(::operator new(size, std::align_val_t{storage_alignment}));
  } catch (const std::bad_alloc&) {  // the cached blocks may be what the system lacks
    if (stats().bytes == 0) throw;
    clear();
    return static_cast<std::byte*>(::operator new(size, std::align_val_t{storage_alignment}));
  }
}

KILN_RUNTIME void storage_cache::release(std::byte* p, std::size_t size) noexcept {
  if (!p) return;
  if (size < storage_cache_min_bytes) {  // never cached: no lock
    free_block(p);
    return;
  }
  std::vector<block> out;
  {
    std::lock_guard lock(m_);
    if (size <= limit_) {
      try {
        held_.push_back({p, size});
        p = nullptr;
        bytes_ += size;
#if defined(KILN_ASAN)
        ASAN_POISON_MEMORY_REGION(held_.back().p, size);
#endif
        trim(limit_, out);
      } catch (...) {  // no room to remember it: it goes back to the system
      }
    }
  }
  if (p) free_block(p);
  for (const block& b : out) free_block(b);
}

KILN_RUNTIME std::size_t storage_cache::set_limit(std::size_t bytes) {
  std::vector<block> out;
  std::size_t old = 0;
  {
    std::lock_guard lock(m_);
    old = limit_;
    limit_ = bytes;
    trim(limit_, out);
  }
  for (const block& b : out) free_block(b);
  return old;
}

KILN_RUNTIME void storage_cache::clear() {
  std::vector<block> out;
  {
    std::lock_guard lock(m_);
    trim(0, out);
  }
  for (const block& b : out) free_block(b);
}

KILN_RUNTIME storage_cache::storage_cache() {
  if (const auto v = env_integer("KILN_STORAGE_CACHE_BYTES", 0)) limit_ = static_cast<std::size_t>(*v);
}

KILN_RUNTIME std::byte* storage_cache::take(std::size_t size) {
  std::lock_guard lock(m_);
  for (std::size_t i = held_.size(); i-- > 0;) {
    if (held_[i].size != size) continue;
    std::byte* p = held_[i].p;
    held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
    bytes_ -= size;
    ++hits_;
#if defined(KILN_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(p, size);
#endif
    return p;
  }
  if (limit_ > 0) ++misses_;
  return nullptr;
}

KILN_RUNTIME void storage_cache::trim(std::size_t keep, std::vector<block>& out) {
  std::size_t n = 0;
  while (n < held_.size() && bytes_ > keep) {
    bytes_ -= held_[n].size;
    ++n;
  }
  if (n == 0) return;
  try {
    out.assign(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(n));
  } catch (...) {  // free them here, under the lock, rather than lose them
    for (std::size_t i = 0; i < n; ++i) free_block(held_[i]);
  }
  held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(n));
  evictions_ += n;
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace detail

/// Sets the most bytes the storage cache holds (0: none; it gives back what is over at once);
/// returns the previous limit. The default is 256 MiB (0 under AddressSanitizer), or
/// KILN_STORAGE_CACHE_BYTES.
inline std::size_t set_storage_cache_limit(std::size_t bytes) { return detail::storage_cache::get().set_limit(bytes); }
inline std::size_t storage_cache_limit() { return detail::storage_cache::get().limit(); }
/// Gives every cached block back to the system (the limit stays).
inline void release_cached_storage() { detail::storage_cache::get().clear(); }
inline storage_cache_stats storage_cache_statistics() { return detail::storage_cache::get().stats(); }

}  // namespace kiln
