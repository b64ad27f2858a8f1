// kiln/io/idx_gzip.hpp: gzip decompression for IDX files (and anything else), with zlib.
//
// Kept apart from idx.hpp so that kiln itself does not depend on zlib: a program that includes
// this header links zlib (CMake: find_package(ZLIB) and target_link_libraries(... ZLIB::ZLIB);
// Debian: zlib1g-dev). Use: kiln::io::read_idx(path, {.to = kiln::f32, .scale = 1.0 / 255,
// .inflate = kiln::io::gunzip}).
#pragma once

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "file.hpp"
#include "idx.hpp"

namespace kiln::io {

/// Decompresses gzip data (RFC 1952; several concatenated members are one stream, as gunzip
/// treats them). Throws format_error if the data is corrupt, truncated, followed by anything
/// that is not another gzip member, or would decompress to more than `max_out` bytes, or to more
/// than `declared` says its first bytes declare (read_idx passes idx_declared_size: a file of
/// many members, or a long one, stops there, not at max_out).
inline std::vector<std::byte> gunzip(std::span<const std::byte> in, const std::string& name,
                                     std::uint64_t max_out = std::uint64_t{1} << 32,
                                     declared_size_fn declared = nullptr) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)  // 16: expect the gzip wrapper, not zlib's
    throw std::runtime_error("kiln: gunzip: zlib could not initialise");
  struct closer {
    z_stream* z;
    ~closer() { inflateEnd(z); }
  } close_z{&z};

  const auto fail = [&](const std::string& what) -> format_error { return format_error(name, "gzip: " + what); };
  std::vector<std::byte> out;
  // Room for one byte past the limit, to see it crossed (max_out may be the largest value).
  std::uint64_t cap = std::min<std::uint64_t>(max_out, SIZE_MAX - 1) + 1;
  bool known = declared == nullptr;  // whether the content's declared size is known (or not asked)
  std::string limit = std::to_string(max_out) + " bytes";
  const auto over = [&] { return fail("decompresses to more than " + limit); };
  // The last 4 bytes of a gzip member are its size modulo 2^32: a first guess, believed only
  // up to 8 times the input (the trailer is not checked until the end, and may be forged); the
  // buffer doubles from there as the data proves larger.
  std::uint64_t guess = 1 << 16;
  if (in.size() >= 18) {
    std::uint64_t isize = 0;
    for (int i = 1; i <= 4; ++i) isize = (isize << 8) | std::to_integer<unsigned>(in[in.size() - static_cast<std::size_t>(i)]);
    guess = std::max<std::uint64_t>(guess, std::min<std::uint64_t>(isize + 1, std::uint64_t{in.size()} * 8));
  }
  out.resize(static_cast<std::size_t>(std::min(guess, cap)));
  std::size_t produced = 0, fed = 0;
  for (;;) {
    if (z.avail_in == 0 && fed < in.size()) {
      const std::size_t chunk = std::min<std::size_t>(in.size() - fed, UINT_MAX);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data() + fed));  // zlib does not write it
      z.avail_in = static_cast<uInt>(chunk);
      fed += chunk;
    }
    if (produced == out.size()) {
      if (produced > max_out) throw over();
      out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(std::uint64_t{out.size()} * 2, cap)));
    }
    const std::size_t room = std::min<std::size_t>(out.size() - produced, UINT_MAX);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    z.avail_out = static_cast<uInt>(room);
    const int ret = inflate(&z, Z_NO_FLUSH);
    produced += room - z.avail_out;
    if (!known) {
      if (const std::uint64_t size = declared(std::span<const std::byte>(out.data(), produced), name)) {
        known = true;
        if (size < max_out) {
          max_out = size;
          limit = "the " + std::to_string(size) + " bytes that its header declares";
          cap = size + 1;
          if (out.size() > cap) out.resize(static_cast<std::size_t>(std::max<std::uint64_t>(cap, produced)));
        }
      }
    }
    if (produced > max_out) throw over();
    if (ret == Z_STREAM_END) {
      const std::size_t rest = z.avail_in + (in.size() - fed);
      if (rest == 0) break;
      // Another member may follow; anything else (padding, garbage) is an error.
      const auto at = static_cast<std::size_t>(reinterpret_cast<const std::byte*>(z.next_in) - in.data());
      if (rest < 2 || std::to_integer<unsigned>(in[at]) != 0x1f || std::to_integer<unsigned>(in[at + 1]) != 0x8b)
        throw fail(std::to_string(rest) + " bytes of trailing data after the compressed stream");
      if (inflateReset(&z) != Z_OK) throw fail("zlib could not reset");
      continue;
    }
    if (ret == Z_OK) continue;
    if (ret == Z_BUF_ERROR && z.avail_out == 0) continue;  // needs more room: grows above
    if (ret == Z_BUF_ERROR && z.avail_in == 0 && fed == in.size()) throw fail("the compressed data is truncated");
    throw fail(std::string("the compressed data is corrupt") + (z.msg ? std::string(" (") + z.msg + ")" : std::string()));
  }
  out.resize(produced);
  return out;
}

}  // namespace kiln::io
